#!/usr/bin/env bash
# A full fine-tune that resumes takes every weight from its checkpoint and reads nothing of the
# base model: after 2 steps and a checkpoint, the base folder's weight files are deleted (config.json
# stays), and the job resumes to step 4, streamed (low_cpu_fsdp) and built whole alike. Its step-4
# checkpoint equals, by `shardtune-ckpt diff`, that of a run that trained 4 steps straight with the
# base present. LoRA still reads the base on resume (it trains on it): with the weights gone it fails.
# usage: resume_without_base_test.sh SHARDTUNE SOURCE_DIR SHARDTUNE_CKPT
set -u
st=$1 src=$2 ckpt=$3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
cd "$src" || exit 1

# configs/tiny-lora.toml without its [peft] section: a full fine-tune of the tiny Llama folder.
sed '/^\[peft\]/,/^$/d' configs/tiny-lora.toml >"$tmp/full.toml"
run() {  # run OUT BASE STEPS LOW_CPU [--set ...]: the full fine-tune of BASE
  local out=$1 base=$2 steps=$3 low=$4
  shift 4
  "$st" run "$tmp/full.toml" -n 2 --set "job.output_dir=$out" --set "model.path=$base" \
    --set fsdp.low_cpu_fsdp="$low" --set fsdp.save_optimizer=true --set train.max_train_step="$steps" \
    --set checkpoint.every_steps=2 --set train.run_validation=false --set train.lr_scheduler=step "$@" \
    >"$out.log" 2>&1
}
for low in true false; do
  base=$tmp/base-$low
  cp -r configs/data/tiny-llama "$base"
  run "$tmp/straight-$low" "$base" 4 "$low" || fail "low_cpu_fsdp=$low: the straight run failed: $(tail -3 "$tmp/straight-$low.log")"
  run "$tmp/resumed-$low" "$base" 2 "$low" || fail "low_cpu_fsdp=$low: the first 2 steps failed"
  rm -f "$base"/*.safetensors "$base"/model.safetensors.index.json
  run "$tmp/resumed-$low" "$base" 4 "$low" ||
    fail "low_cpu_fsdp=$low: the resume needed the deleted base: $(grep -h -m2 -i error "$tmp/resumed-$low.log")"
  grep -q "the base weights are not read: the checkpoint to resume holds every weight" "$tmp/resumed-$low.log" ||
    fail "low_cpu_fsdp=$low: the resume does not say it left the base unread"
  "$ckpt" diff "$tmp/resumed-$low/checkpoints/step-0000004" "$tmp/straight-$low/checkpoints/step-0000004" \
    >"$tmp/diff-$low" 2>&1 || fail "low_cpu_fsdp=$low: the resumed step 4 differs from the straight one: $(tail -3 "$tmp/diff-$low")"
done

# LoRA reads the base again on resume: without its weights it cannot.
base=$tmp/base-lora
cp -r configs/data/tiny-llama "$base"
"$st" run configs/tiny-lora.toml -n 2 --set "job.output_dir=$tmp/lora" --set "model.path=$base" --set train.max_train_step=2 \
  --set checkpoint.every_steps=2 --set train.run_validation=false >"$tmp/lora.log" 2>&1 || fail "the LoRA run failed"
rm -f "$base"/*.safetensors
"$st" run configs/tiny-lora.toml -n 2 --set "job.output_dir=$tmp/lora" --set "model.path=$base" --set train.max_train_step=4 \
  --set checkpoint.every_steps=2 --set train.run_validation=false >"$tmp/lora2.log" 2>&1 &&
  fail "a LoRA resume ran without its base's weights"

[ "$failures" -eq 0 ] && echo "PASS: a resumed full fine-tune reads none of the base and equals a straight run"
exit $((failures > 0))
