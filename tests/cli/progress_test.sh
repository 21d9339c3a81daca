#!/usr/bin/env bash
# Progress bars on a terminal, plain lines in files, through the real programs:
#  - shardtune-ckpt (import-hf, reshard, verify, export-hf) and shardtune-tokenize under a
#    pseudo-terminal (util-linux `script`) redraw one bar in place, ending at 100%, never wider than
#    the terminal; with stderr in a file they write no control characters, only their closing line;
#  - `shardtune run` on a terminal: rank 0 draws the bars of streaming the weights and tokenizing
#    the data on the terminal through mpirun, while its log file gets plain lines; run with its
#    output in a file, the same job writes no control characters anywhere.
# usage: progress_test.sh SHARDTUNE SOURCE_DIR SHARDTUNE_CKPT SHARDTUNE_TOKENIZE
set -u
st=$1 src=$2 ckpt=$3 tok=$4
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
cd "$src" || exit 1

# Runs a command on a 100-column pseudo-terminal; its screen output goes to the file $1.
on_terminal() {
  local out=$1
  shift
  local cmd
  printf -v cmd '%q ' "$@"
  COLUMNS=100 TERM=xterm script -qec "stty cols 100 2>/dev/null; $cmd" /dev/null >"$out" 2>&1
}

# FILE LABEL: a bar of LABEL redrawn in place, reaching 100%, each redraw within 99 columns.
check_bar() {
  python3 - "$1" "$2" <<'PY' || fail "no proper '$2' bar in $1: $(tr '\r\033' '|^' <"$1" | tail -c 600)"
import re, sys
text = open(sys.argv[1], encoding="utf-8", errors="replace", newline="").read()
label = sys.argv[2]
draws = [d.split("\x1b[K")[0] for d in text.split("\r") if d.startswith(label + " [")]
assert len(draws) >= 1, "no redraw"
assert all(len(d) <= 99 for d in draws), max(draws, key=len)
assert re.search(r"#\] 100% ", draws[-1]), draws[-1]
assert all(re.search(r"\] +\d+% ", d) for d in draws), draws
PY
}

# FILE: no carriage return and no escape sequence.
check_plain() {
  if grep -q $'[\r\033]' "$1"; then fail "$1 holds control characters: $(grep -c $'\r' "$1") carriage returns"; fi
}

# --- the checkpoint tools --------------------------------------------------------------------
on_terminal "$tmp/import.tty" "$ckpt" import-hf configs/data/tiny-llama "$tmp/full" || fail "import-hf on a terminal: $(tail -c 400 "$tmp/import.tty")"
check_bar "$tmp/import.tty" importing
grep -q "imported: 0\.[0-9]* GB in .*, peak memory [0-9]* MiB" "$tmp/import.tty" || fail "import-hf printed no closing line"
on_terminal "$tmp/reshard.tty" "$ckpt" reshard "$tmp/full" "$tmp/two" -w 2 || fail "reshard on a terminal"
check_bar "$tmp/reshard.tty" resharding
on_terminal "$tmp/verify.tty" "$ckpt" verify "$tmp/two" || fail "verify on a terminal"
check_bar "$tmp/verify.tty" verifying
on_terminal "$tmp/export.tty" "$ckpt" export-hf "$tmp/two" "$tmp/hf" || fail "export-hf on a terminal"
check_bar "$tmp/export.tty" exporting

"$ckpt" reshard "$tmp/full" "$tmp/three" -w 3 2>"$tmp/reshard.err" || fail "reshard into a file: $(cat "$tmp/reshard.err")"
check_plain "$tmp/reshard.err"
grep -q "^resharded: .* peak memory [0-9]* MiB$" "$tmp/reshard.err" || fail "reshard wrote no closing line: $(cat "$tmp/reshard.err")"
! grep -vqE '^(resharding: [0-9.]+/[0-9.]+ GB, .* GB/s, ETA [0-9:]+|resharded: .*)$' "$tmp/reshard.err" ||
  fail "reshard wrote other lines than its progress lines and its closing line: $(cat "$tmp/reshard.err")"
"$ckpt" verify "$tmp/three" >"$tmp/verify.out" 2>"$tmp/verify.err" || fail "verify into a file"
check_plain "$tmp/verify.err"

# --- the tokenizer tool ----------------------------------------------------------------------
python3 -c 'import json; [print(r["instruction"]) for r in json.load(open("configs/data/tiny-alpaca.json"))]' >"$tmp/lines.txt"
on_terminal "$tmp/tok.tty" "$tok" configs/data/tiny-tokenizer/tokenizer.json "$tmp/lines.txt" || fail "shardtune-tokenize on a terminal"
check_bar "$tmp/tok.tty" tokenizing
"$tok" configs/data/tiny-tokenizer/tokenizer.json "$tmp/lines.txt" >"$tmp/tok.out" 2>"$tmp/tok.err" || fail "shardtune-tokenize"
check_plain "$tmp/tok.err"
check_plain "$tmp/tok.out"
[[ $(wc -l <"$tmp/tok.out") -eq $(wc -l <"$tmp/lines.txt") ]] || fail "the progress got into the ids"

# --- a training job: streamed weights and tokenization on rank 0 --------------------------------
cp configs/data/tiny-alpaca.json "$tmp/train.json"  # a fresh token cache: the job tokenizes
job=(configs/tiny-lora.toml -n 2 --set fsdp.low_cpu_fsdp=true --set train.max_train_step=2 --set train.run_validation=false
     --set "data.train_file=$tmp/train.json")
on_terminal "$tmp/run.tty" "$st" run "${job[@]}" --set "job.output_dir=$tmp/tty" || fail "the run on a terminal: $(tail -c 600 "$tmp/run.tty")"
check_bar "$tmp/run.tty" "loading the weights"
check_bar "$tmp/run.tty" "tokenizing the training data"
log=$tmp/tty/logs/rank-00000.log
grep -q "loaded the weights: 0\.[0-9]* GB in" "$log" || fail "rank 0's log has no closing line for the loading"
grep -q "tokenized the training data: [0-9]* examples in" "$log" || fail "rank 0's log has no closing line for the tokenization"
check_plain "$log"
check_plain "$tmp/tty/logs/rank-00001.log"
[[ $(grep -c "loaded the weights" "$tmp/tty/logs/rank-00001.log") -eq 0 ]] || fail "rank 1 reported the loading"

rm "$tmp"/.train.json.*.tokens
"$st" run "${job[@]}" --set "job.output_dir=$tmp/file" >"$tmp/run.out" 2>&1 || fail "the run into a file: $(tail -5 "$tmp/run.out")"
check_plain "$tmp/run.out"
check_plain "$tmp/file/logs/rank-00000.log"
grep -q "tokenized the training data: [0-9]* examples in" "$tmp/run.out" || fail "no closing line on the console"

if ((failures)); then
  echo "$failures failure(s)"
  exit 1
fi
echo "progress: bars on terminals, plain lines in files"
