#!/usr/bin/env bash
# Tokenizer speed: shardtune's tokens/s divided by Hugging Face's JavaScript tokenizers' on the
# same 10,000-line corpus, same machine, same run (3 passes each, one warm-up pass first).
# usage: bench/tokenizer.sh [BUILD_DIR]     (the npm reference comes from scripts/setup.sh)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${1:-$root/build}
ref=$build/tokenizer-reference
work=$build/tokenizer-bench
mkdir -p "$work"
cp "$root/tests/tokenizer/reference.mjs" "$ref/"
/usr/bin/python3 "$root/tests/tokenizer/make_corpus.py" "$work/corpus.txt" 10000 >/dev/null
rate() { sed 's/.*"tokens_per_second": *\([0-9.e+]*\).*/\1/'; }
for name in llama3 llama2; do
  models=$ref/node_modules/@lenml/tokenizer-$name/models
  "$build/bin/shardtune-tokenize" "$models/tokenizer.json" "$work/corpus.txt" --bench 1 >/dev/null
  ours=$("$build/bin/shardtune-tokenize" "$models/tokenizer.json" "$work/corpus.txt" --bench 3 | rate)
  theirs=$(node "$ref/reference.mjs" "$models/tokenizer.json" "$models/tokenizer_config.json" "$work/corpus.txt" --bench 3 | rate)
  /usr/bin/python3 -c "import sys; o, t = float(sys.argv[2]), float(sys.argv[3]); print(f'{sys.argv[1]}: shardtune {o/1e6:.2f} M tokens/s, @huggingface/tokenizers {t/1e6:.2f} M tokens/s, ratio {o/t:.1f}x')" \
    "$name" "$ours" "$theirs"
done
