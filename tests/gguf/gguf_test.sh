#!/usr/bin/env bash
# `shardtune-ckpt export-gguf` against llama.cpp itself (node-llama-cpp's prebuilt CPU binary,
# pinned in tests/gguf/package-lock.json):
#  - the plain-PyTorch reference's fixture models (untied MHA, GQA with Llama 3 RoPE scaling, a
#    tied head with explicit head_dim, biases with linear RoPE scaling) and a trained 2-rank sharded
#    checkpoint of the tiny chat model, exported in f32, load in llama.cpp, whose logits on fixed
#    ids equal shardtune's (shardtune-generate on the same source) within 1e-4 of the largest logit
#    at every position (compared up to llama.cpp's additive constant: both centred on their mean);
#    f16 and bf16 exports within the bounds their rounding allows (stated below);
#  - the tokenizer embedded: llama.cpp tokenizes text (special tokens included) to the ids
#    shardtune's Hugging Face-identical tokenizer gives, for byte-level BPE ("gpt2", Llama 3's
#    pre-tokenizer) and a SentencePiece-style tokenizer ("llama"); the chat template is the file's;
#  - refusals: an adapter checkpoint, a model without a tokenizer; no partial file is left.
# usage: gguf_test.sh SHARDTUNE SOURCE_DIR SHARDTUNE_CKPT REFERENCE_DIR TORCH_REFERENCE_DIR WORK_DIR TRAIN_SENTENCEPIECE
set -u
st=$1 src=$2 ckpt=$3 ref=$4 torch_ref=$5 work=$6 train_sp=$7
gen=$(dirname "$st")/shardtune-generate
tok=$(dirname "$st")/shardtune-tokenize
py=/usr/bin/python3
pkg=$src/tests/gguf
source "$src/tests/tokenizer/npm_reference.sh" || exit 1
export NODE_LLAMA_CPP_SKIP_DOWNLOAD=true
rm -rf "$work" && mkdir -p "$work"
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
cd "$src" || exit 1
ids='[1, 17, 305, 42, 99, 7, 250, 3, 511, 12, 60, 200, 44, 123]'
exports=()  # MODEL.gguf=OUT pairs for llama.cpp, which then runs once for all of them

# export NAME SOURCE [export-gguf options]: $work/NAME.gguf, queued for llama.cpp.
export_one() {
  local name=$1 source=$2
  shift 2
  "$ckpt" export-gguf "$source" "$work/$name.gguf" "$@" >"$work/$name.export" 2>&1 ||
    { fail "$name: export-gguf: $(tail -3 "$work/$name.export")"; return; }
  exports+=("$work/$name.gguf=$work/$name.llama")
}

# compare NAME BOUND SOURCE [generate options]: llama.cpp's logits on $ids against shardtune's.
compare() {
  local name=$1 bound=$2 source=$3
  shift 3
  [[ -s "$work/$name.llama.json" ]] || { fail "$name: llama.cpp did not evaluate it"; return; }
  "$gen" "$source" --ids "$(tr -d '[] ' <<<"$ids")" --max-new-tokens 1 --json --json-logits "$@" \
    >"$work/$name.st.json" 2>"$work/$name.st.err" || { fail "$name: shardtune-generate: $(cat "$work/$name.st.err")"; return; }
  $py - "$work/$name.llama.json" "$work/$name.st.json" "$bound" "$name" <<'PY' || fail "$name: llama.cpp's logits differ"
import json, sys
llama = json.load(open(sys.argv[1]))
ours = json.load(open(sys.argv[2]))["prompt_logits"]
bound, name = float(sys.argv[3]), sys.argv[4]
assert len(llama) == len(ours), (len(llama), len(ours))
worst = 0.0
for a, b in zip(llama, ours):
    assert all(x is not None for x in a), "a token without probability"
    ma, mb = sum(a) / len(a), sum(b) / len(b)
    scale = max(abs(x) for x in b)
    worst = max(worst, max(abs((x - ma) - (y - mb)) for x, y in zip(a, b)) / scale)
print(f"{name}: llama.cpp's logits within {worst:.2e} of the largest (bound {bound:g}), {len(ours)} positions")
sys.exit(0 if worst <= bound else 1)
PY
}

# --- What is exported: the fixture models in f32, a trained sharded checkpoint in f32, f16 and bf16,
# and the Llama 2 fixture with a SentencePiece tokenizer trained here (converted to tokenizer.json as
# transformers converts Llama's) ---------------------------------------------------------------------
tiny_tok=configs/data/tiny-tokenizer/tokenizer.json
models=(llama2-mha llama3-gqa-rope llama32-tied llama-bias-linear)
for model in "${models[@]}"; do export_one "$model" "$torch_ref/$model" --tokenizer "$tiny_tok" --dtype f32; done
"$st" run configs/tiny-chat.toml -n 2 --set "job.output_dir=$work/chat" --set train.max_train_step=20 \
  --set train.run_validation=false --set checkpoint.every_steps=0 >"$work/run.log" 2>&1 || fail "tiny-chat failed"
step=$work/chat/checkpoints/step-0000020
for dtype in f32 f16 bf16; do export_one "chat-$dtype" "$step" --dtype "$dtype"; done
printf '%s\n' "What color is the sky?" "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi!<|eot_id|>" \
  "  spaces,  tabs	and 123456 numbers" "Ünïcödé — 日本語 🎉" "don't won't it's" >"$work/lines.txt"
grep -v '<|' "$work/lines.txt" >"$work/lines-plain.txt"
sp=$work/sp && mkdir -p "$sp"
$py -c 'import json; [print(r["instruction"], r["input"], r["output"]) for r in json.load(open("configs/data/tiny-alpaca.json"))]' \
  >"$sp/train.txt"
cat "$work/lines.txt" >>"$sp/train.txt"
"$train_sp" "$sp/train.txt" "$sp/tokenizer" 600 2>"$sp/train.log" || fail "sentencepiece training: $(tail -2 "$sp/train.log")"
"$tok" "$sp/tokenizer.model" --write-json "$sp/tokenizer.json" || fail "no tokenizer.json from the SentencePiece model"
export_one spm "$torch_ref/llama2-mha" --tokenizer "$sp/tokenizer.json" --dtype f32
node "$ref/llama_cpp_logprobs.mjs" --ids "$ids" "${exports[@]}" 2>"$work/llama.err" ||
  fail "llama.cpp did not load or run the exports: $(tail -3 "$work/llama.err")"
node "$ref/llama_cpp_logprobs.mjs" --tokenize "$work/lines.txt" "$work/chat-f32.gguf=$work/gpt2-ids" 2>>"$work/llama.err" &&
  node "$ref/llama_cpp_logprobs.mjs" --tokenize "$work/lines-plain.txt" "$work/spm.gguf=$work/spm-ids" 2>>"$work/llama.err" ||
  fail "llama.cpp could not tokenize: $(tail -3 "$work/llama.err")"

# --- Logits ---------------------------------------------------------------------------------------
for model in "${models[@]}"; do compare "$model" 1e-4 "$torch_ref/$model" --tokenizer "$tiny_tok"; done
grep -q '"architecture":"llama","tokens":1024,"tokenizer":"gpt2"' "$work/llama2-mha.llama.meta" ||
  fail "the fixture's vocabulary is not 1024 tokens of a gpt2 tokenizer: $(cat "$work/llama2-mha.llama.meta")"
# f16 and bf16: llama.cpp multiplies with the activations rounded to the weights' type too, so the
# bound follows the type's precision (2^-11 and 2^-8 relative), not shardtune's arithmetic.
for dtype_bound in f32:1e-4 f16:5e-3 bf16:4e-2; do
  dtype=${dtype_bound%%:*} bound=${dtype_bound#*:}
  grep -q "exported .*chat-$dtype.gguf ($dtype, tokenizer \"gpt2\", chat template)" "$work/chat-$dtype.export" ||
    fail "chat $dtype: the export does not say what it wrote: $(tail -2 "$work/chat-$dtype.export")"
  compare "chat-$dtype" "$bound" "$step"
done
f32_bytes=$(stat -c %s "$work/chat-f32.gguf") bf16_bytes=$(stat -c %s "$work/chat-bf16.gguf")
((bf16_bytes < f32_bytes * 6 / 10)) || fail "bf16 ($bf16_bytes bytes) is not about half of f32 ($f32_bytes)"
$py - "$work/chat-f32.llama.meta" configs/data/tiny-chat-tokenizer/tokenizer_config.json <<'PY' || fail "the chat template is not the tokenizer's"
import json, sys
meta, config = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
sys.exit(0 if meta["chat_template"] == config["chat_template"] and meta["tokens"] == 533 else 1)
PY
grep -q 'tokenizer "llama"' "$work/spm.export" || fail "the SentencePiece tokenizer is not exported as \"llama\""
compare spm 1e-4 "$torch_ref/llama2-mha" --tokenizer "$sp/tokenizer.json"

# --- The embedded tokenizers tokenize as Hugging Face's -------------------------------------------
check_tokens() {  # NAME LINES TOKENIZER_JSON
  "$tok" "$3" "$2" >"$work/$1.st-ids" || { fail "$1: shardtune-tokenize failed"; return; }
  diff -q <(tr -d ' ' <"$work/$1-ids.json") <(tr -d ' ' <"$work/$1.st-ids") >/dev/null ||
    fail "$1: llama.cpp tokenizes otherwise: $(diff <(tr -d ' ' <"$work/$1-ids.json") <(tr -d ' ' <"$work/$1.st-ids") | head -4)"
}
check_tokens gpt2 "$work/lines.txt" configs/data/tiny-chat-tokenizer/tokenizer.json
check_tokens spm "$work/lines-plain.txt" "$sp/tokenizer.json"

# --- Refusals ---------------------------------------------------------------------------------------
"$ckpt" export-gguf "$torch_ref/llama2-mha" "$work/none.gguf" >"$work/err" 2>&1 && fail "an export without a tokenizer"
grep -q "no tokenizer.json for .*llama2-mha: give --tokenizer" "$work/err" || fail "no tokenizer: $(cat "$work/err")"
"$st" run configs/tiny-lora.toml -n 1 --set "job.output_dir=$work/lora" --set train.max_train_step=1 \
  --set train.run_validation=false >/dev/null 2>&1 || fail "tiny-lora failed"
"$ckpt" export-gguf "$work/lora/checkpoints/step-0000001" "$work/lora.gguf" >"$work/err" 2>&1 && fail "an adapter export"
grep -q "holds LoRA adapters, not a whole model: merge-lora" "$work/err" || fail "adapters: $(cat "$work/err")"
[[ -e "$work/none.gguf" || -e "$work/lora.gguf" ]] && fail "a refused export left a file"
ls -a "$work" | grep -q "\.tmp" && fail "a temporary file was left: $(ls -a "$work")"

grep -o '"llama_cpp":"[^"]*"' "$work/chat-f32.llama.meta" | head -1
((failures == 0)) && echo "PASS"
exit $((failures > 0))
