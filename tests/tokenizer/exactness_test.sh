#!/usr/bin/env bash
# Tokenizer exactness against Hugging Face's own JavaScript implementation (@huggingface/tokenizers),
# on the real Llama 3 tokenizer.json and a 32000-token SentencePiece-style tokenizer.json (Mistral
# 7B's ids), both shipped on npm, and on the example job's own small tokenizer (configs/data): a corpus of 10,000 lines must give identical ids, and
# decode(encode(x)) == x (for SentencePiece style: on lines without special tokens, as that
# format prepends a space after each special token).
# A SentencePiece tokenizer.model (Llama 2's format): a BPE model with Llama 2's settings is trained
# on part of the corpus; libsentencepiece encoding it (shardtune's .model path) must give the ids
# the JavaScript reference gives on its conversion to tokenizer.json (shardtune-tokenize
# --write-json, as transformers converts Llama's), and so must shardtune on that conversion.
# usage: exactness_test.sh SHARDTUNE_TOKENIZE SOURCE_DIR REFERENCE_DIR WORK_DIR TRAIN_SENTENCEPIECE
set -u
tok=$1 src=$2 ref=$3 work=$4 train_sp=$5
source "$src/tests/tokenizer/npm_reference.sh" || exit 1
mkdir -p "$work"
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
/usr/bin/python3 "$src/tests/tokenizer/make_corpus.py" "$work/corpus.txt" 10000 || fail "no corpus"
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

# SentencePiece: train, convert, compare.
sp="$work/sentencepiece"
mkdir -p "$sp"
/usr/bin/python3 - "$work/corpus.txt" "$sp/train.txt" <<'PY'
import sys
lines = [l for l in open(sys.argv[1], "rb").read().split(b"\n")[:6000] if l]
open(sys.argv[2], "wb").write(b"\n".join(l.decode("utf-8", "replace").encode() for l in lines) + b"\n")
PY
"$train_sp" "$sp/train.txt" "$sp/tokenizer" 3000 2>"$sp/train.log" || fail "sentencepiece training failed: $(tail -3 "$sp/train.log")"
"$tok" "$sp/tokenizer.model" --write-json "$sp/tokenizer.json" || fail "no tokenizer.json from the model"
echo '{"bos_token": "<s>", "eos_token": "</s>", "clean_up_tokenization_spaces": false}' >"$sp/tokenizer_config.json"
node "$ref/reference.mjs" "$sp/tokenizer.json" "$sp/tokenizer_config.json" "$work/corpus.txt" >"$sp/reference.txt" ||
  fail "sentencepiece: the reference failed"
"$tok" "$sp/tokenizer.model" "$work/corpus.txt" --check-roundtrip --roundtrip-skip-special >"$sp/model.txt" ||
  fail "sentencepiece .model: decode(encode(x)) != x"
"$tok" "$sp/tokenizer.json" "$work/corpus.txt" >"$sp/json.txt" || fail "sentencepiece json failed"
for ours in model json; do
  differ=$(diff "$sp/reference.txt" "$sp/$ours.txt" | grep -c '^<')
  if ((differ > 0)); then
    fail "sentencepiece ($ours): $differ lines give other ids than the reference; first:"
    diff "$sp/reference.txt" "$sp/$ours.txt" | head -4
  else
    echo "sentencepiece tokenizer.$ours: $(wc -l <"$sp/reference.txt") lines identical to @huggingface/tokenizers on the converted file"
  fi
done

((failures == 0)) && echo "PASS"
exit $((failures > 0))
