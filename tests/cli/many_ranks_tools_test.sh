#!/usr/bin/env bash
# Every shardtune-ckpt command on checkpoints resharded to 512 ranks (512 rank files), under
# `ulimit -n 256`: readers, read-ahead and writers keep a bounded number of files open
# (common/open_files.h). Each output equals the same command's output on the checkpoint before it
# was resharded: byte for byte for exported files, by `diff` for checkpoints.
# usage: many_ranks_tools_test.sh SHARDTUNE SOURCE_DIR SHARDTUNE_CKPT
set -u
st=$1 src=$2 ckpt=$3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
cd "$src" || exit 1
tok=configs/data/tiny-tokenizer/tokenizer.json  # the tokenizer tiny-alpaca trains with

# A full fine-tune's checkpoint with optimizer moments and training state, and a LoRA adapter one.
common=(--set train.max_train_step=2 --set checkpoint.every_steps=2 --set train.run_validation=false)
"$st" run configs/tiny-alpaca.toml -n 2 --set "job.output_dir=$tmp/full" --set fsdp.save_optimizer=true "${common[@]}" \
  >"$tmp/log" 2>&1 || { fail "the full job failed"; tail -20 "$tmp/log"; exit 1; }
"$st" run configs/tiny-lora.toml -n 2 --set "job.output_dir=$tmp/lora" "${common[@]}" >"$tmp/log" 2>&1 ||
  { fail "the LoRA job failed"; tail -20 "$tmp/log"; exit 1; }
full=$tmp/full/checkpoints/step-0000002 lora=$tmp/lora/checkpoints/step-0000002

# The same commands on the 2-rank checkpoints, with the default limit: the reference outputs.
"$ckpt" export-hf "$full" "$tmp/ref-hf" >/dev/null 2>&1 || fail "export-hf (2 ranks)"
"$ckpt" export-gguf "$full" "$tmp/ref.gguf" --tokenizer "$tok" >/dev/null 2>&1 || fail "export-gguf (2 ranks)"
"$ckpt" export-peft "$lora" "$tmp/ref-peft" >/dev/null 2>&1 || fail "export-peft (2 ranks)"
"$ckpt" merge-lora "$lora" configs/data/tiny-llama "$tmp/ref-merged" >/dev/null 2>&1 || fail "merge-lora (2 ranks)"

same_files() {  # same_files A B WHAT: every file of folder (or file) A equals B's
  if diff -r "$1" "$2" >/dev/null; then return 0; fi
  fail "$3 differs from the 2-rank checkpoint's"
}
limited() {  # limited NAME COMMAND...: runs a shardtune-ckpt command under ulimit -n 256
  local name=$1
  shift
  (ulimit -n 256 && [ "$(ulimit -n)" = 256 ] && exec "$ckpt" "$@") >"$tmp/$name.log" 2>&1 ||
    { fail "$name under ulimit -n 256: $(tail -3 "$tmp/$name.log")"; return 1; }
}

limited reshard-full reshard "$full" "$tmp/f512" -w 512
limited reshard-lora reshard "$lora" "$tmp/l512" -w 512
[ "$(ls "$tmp/f512" | grep -c '^rank-.*\.h5$')" = 512 ] || fail "reshard -w 512 did not write 512 rank files"
limited inspect inspect "$tmp/f512" && grep -q "rank-00511.h5" "$tmp/inspect.log" || fail "inspect does not list rank 511"
limited verify verify "$tmp/f512" && grep -q " 0 bad" "$tmp/verify.log" || fail "verify: $(tail -1 "$tmp/verify.log")"
limited diff-full diff "$tmp/f512" "$full" || fail "diff: the 512-rank checkpoint differs from its source"
limited consolidate consolidate "$tmp/f512" "$tmp/consolidated" && limited diff-consolidated diff "$tmp/consolidated" "$full"
limited reshard-3 reshard "$tmp/f512" "$tmp/f3" -w 3 && limited diff-3 diff "$tmp/f3" "$full"
limited reshard-512 reshard "$tmp/f512" "$tmp/f512b" -w 512 && limited diff-512 diff "$tmp/f512b" "$tmp/f512"
limited export-hf export-hf "$tmp/f512" "$tmp/hf" && same_files "$tmp/hf" "$tmp/ref-hf" "export-hf"
limited import-hf import-hf "$tmp/hf" "$tmp/imported"
limited export-gguf export-gguf "$tmp/f512" "$tmp/x.gguf" --tokenizer "$tok" && same_files "$tmp/x.gguf" "$tmp/ref.gguf" "export-gguf"
limited verify-lora verify "$tmp/l512"
limited export-peft export-peft "$tmp/l512" "$tmp/peft" && same_files "$tmp/peft" "$tmp/ref-peft" "export-peft"
limited merge-lora merge-lora "$tmp/l512" configs/data/tiny-llama "$tmp/merged" &&
  same_files "$tmp/merged" "$tmp/ref-merged" "merge-lora"

# Where the limit is too small even for that, the error says which limit and what to do.
(ulimit -n 12 && exec "$ckpt" verify "$tmp/f512") >"$tmp/tight.log" 2>&1
rc=$?
if [ "$rc" != 0 ]; then
  grep -q "ulimit -n" "$tmp/tight.log" || fail "a verify out of descriptors does not name the limit: $(tail -2 "$tmp/tight.log")"
fi

[ "$failures" -eq 0 ] && echo "PASS: every shardtune-ckpt command on 512-rank checkpoints under ulimit -n 256"
exit $((failures > 0))
