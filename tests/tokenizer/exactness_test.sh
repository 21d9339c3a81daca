#!/usr/bin/env bash
# Tokenizer exactness against Hugging Face's own JavaScript implementation (@huggingface/tokenizers),
# on the real Llama 3 tokenizer.json and a 32000-token SentencePiece-style tokenizer.json (Mistral
# 7B's ids), both shipped on npm, and on the example job's own small tokenizer (configs/data): a corpus of 10,000 lines must give identical ids, and
# decode(encode(x)) == x (for SentencePiece style: on lines without special tokens, as that
# format prepends a space after each special token).
# usage: exactness_test.sh SHARDTUNE_TOKENIZE SOURCE_DIR REFERENCE_DIR WORK_DIR
set -u
tok=$1 src=$2 ref=$3 work=$4
[[ -d "$ref/node_modules/@huggingface/tokenizers" ]] ||
  { echo "FAIL: the npm reference is not installed in $ref: run scripts/setup.sh (needs npm)"; exit 1; }
mkdir -p "$work"
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
cp "$src/tests/tokenizer/reference.mjs" "$ref/"
/usr/bin/python3 "$src/tests/tokenizer/make_corpus.py" "$src" "$work/corpus.txt" 10000 || fail "no corpus"
for name in llama3 llama2 tiny; do
  models="$ref/node_modules/@lenml/tokenizer-$name/models"
  [[ $name == tiny ]] && models="$src/configs/data/tiny-tokenizer"  # the example job's own
  node "$ref/reference.mjs" "$models/tokenizer.json" "$models/tokenizer_config.json" "$work/corpus.txt" \
    >"$work/reference-$name.txt" || fail "$name: the reference failed"
  roundtrip=(--check-roundtrip)
  [[ $name == llama2 ]] && roundtrip+=(--roundtrip-skip-special)
  "$tok" "$models/tokenizer.json" "$work/corpus.txt" "${roundtrip[@]}" >"$work/shardtune-$name.txt" ||
    fail "$name: decode(encode(x)) != x"
  lines=$(wc -l <"$work/reference-$name.txt")
  ((lines >= 10000)) || fail "$name: only $lines lines compared"
  differ=$(diff "$work/reference-$name.txt" "$work/shardtune-$name.txt" | grep -c '^<')
  if ((differ > 0)); then
    fail "$name: $differ of $lines lines give other ids than the reference; first:"
    diff "$work/reference-$name.txt" "$work/shardtune-$name.txt" | head -4
  else
    echo "$name: $lines lines, $(grep -o '[0-9]\+' "$work/reference-$name.txt" | wc -l) ids, identical to @huggingface/tokenizers"
  fi
done
((failures == 0)) && echo "PASS"
exit $((failures > 0))
