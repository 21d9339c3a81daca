#!/usr/bin/env bash
# configs/tiny-qlora.toml end to end, through `shardtune run` (LoRA on an NF4 base):
#  - its loss falls; the log shows the NF4 base; checkpoints hold only the adapters and record the
#    quantisation (manifest, read back by python);
#  - the base streamed into shards (each rank quantising its own records) gives bitwise the same
#    losses as one quantised from the whole model, and so does the same base stored in 4 bits as
#    bitsandbytes writes it (tests/reference/make_bnb_folder.py), each rank reading its records;
#    such a folder with another method or block size, another 8-bit map, or FP4 is refused, named;
#  - a NaN in a projection is named with its element, whole or streamed, and nothing is written;
#  - a checkpoint of 2 ranks resumes at 3 ranks and continues to the same sample;
#  - resuming with another quantisation (LoRA, or another block size) is refused with the reason;
#  - export-peft writes a PEFT adapter folder; merge-lora writes a merged model whose logits equal
#    the numpy-NF4-dequantised base + adapters (tests/cli/lora_check.py --nf4);
#  - bitsandbytes' spellings are refused naming the key to use;
#  - on an fp32 base under bf16 mixed precision, merge-lora and generate quantise the bf16-rounded
#    projections that training quantised (the numpy reference rounds them likewise).
# usage: qlora_test.sh SHARDTUNE SOURCE_DIR SHARDTUNE_CKPT
set -u
st=$1 src=$2 ckpt=$3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
py=/usr/bin/python3
export PYTHONDONTWRITEBYTECODE=1
cd "$src" || exit 1

run() {  # run OUT RANKS STEPS [extra --set ...]: the tiny-qlora job, validation off
  local out=$1 ranks=$2 steps=$3
  shift 3
  "$st" run configs/tiny-qlora.toml -n "$ranks" --set "job.output_dir=$out" --set train.max_train_step="$steps" \
    --set train.run_validation=false --set checkpoint.every_steps=20 "$@" >"$tmp/log" 2>&1
}
losses() { grep '"step":' "$1/metrics.jsonl" | sed 's/.*"loss": \([^,]*\),.*/\1/'; }

run "$tmp/a" 2 60 || { fail "tiny-qlora failed"; tail -20 "$tmp/log"; }
grep -q "trainable (.*QLoRA r = 8 on all-linear, lm_head)" "$tmp/log" || fail "the log does not show the QLoRA model"
grep -q "QLoRA: .* in NF4 (blocks of 32, scales double-quantised)" "$tmp/log" || fail "the log does not show the NF4 base"
$py - "$tmp/a/metrics.jsonl" <<'PY' || fail "the loss did not fall"
import json, sys
losses = [json.loads(l)["loss"] for l in open(sys.argv[1]) if '"step":' in l]
first, last = sum(losses[:5]) / 5, sum(losses[-5:]) / 5
print(f"tiny-qlora: loss {first:.3f} -> {last:.3f} over {len(losses)} steps")
sys.exit(0 if last < 0.75 * first else 1)
PY
$py - "$tmp/a/checkpoints/step-0000060" <<'PY' || fail "the adapter checkpoint does not record the quantisation"
import json, sys
m = json.load(open(sys.argv[1] + "/manifest.json"))
a = m["adapter"]
assert a["method"] == "qlora" and a["quantization"] == {"type": "nf4", "block_size": 32, "double_quant": True}, a
assert all(".lora_A." in n or ".lora_B." in n for n in m["tensors"]), sorted(m["tensors"])[:3]
print("QLoRA checkpoint:", a["quantization"])
PY

# Streamed (low_cpu_fsdp): each rank quantises only its own records.
run "$tmp/stream" 2 10 --set fsdp.low_cpu_fsdp=true || fail "the streamed run failed: $(tail -3 "$tmp/log")"
grep -q "streamed the weights into shards" "$tmp/log" || fail "the base was not streamed"
[[ "$(losses "$tmp/stream")" == "$(losses "$tmp/a" | head -10)" ]] || fail "streaming the base changed the losses"

# A folder stored in 4 bits as bitsandbytes writes it, made from the same base by the numpy
# reference: each rank reads its records as stored, and training is bitwise the same as on the
# original quantised by shardtune.
$py tests/reference/make_bnb_folder.py configs/data/tiny-llama "$tmp/bnb" 32 true >/dev/null ||
  fail "make_bnb_folder.py failed"
run "$tmp/prequantised" 2 10 --set "model.path=$tmp/bnb" || fail "the pre-quantised run failed: $(tail -3 "$tmp/log")"
[[ "$(losses "$tmp/prequantised")" == "$(losses "$tmp/a" | head -10)" ]] ||
  fail "the pre-quantised folder trained otherwise than quantising its original"
# Generation from the checkpoint of the 4-bit folder (its NF4 records dequantised as stored) and
# from the one of its original (quantised as training did): the same adapters, the same logits.
gen_json() { "$st" generate "$1" --ids 1,40,41,42 --max-new-tokens 4 --json --json-logits 2>>"$tmp/gen.err"; }
g1=$(gen_json "$tmp/stream/checkpoints/step-0000010") || fail "generate from the QLoRA checkpoint: $(tail -2 "$tmp/gen.err")"
g2=$(gen_json "$tmp/prequantised/checkpoints/step-0000010") ||
  fail "generate from the QLoRA checkpoint of a 4-bit folder: $(tail -2 "$tmp/gen.err")"
[[ -n "$g1" && "$g1" == "$g2" ]] || fail "the 4-bit folder's checkpoint generates otherwise than its original's"
"$ckpt" export-gguf "$tmp/bnb" "$tmp/bnb.gguf" >"$tmp/log" 2>&1 && fail "export-gguf of a 4-bit folder exited 0"
grep -q "stores its projections in 4 bits (a bitsandbytes folder)" "$tmp/log" ||
  fail "export-gguf of a 4-bit folder: $(cat "$tmp/log")"
run "$tmp/bnb-lora" 2 1 --set "model.path=$tmp/bnb" --set peft.method=lora --set peft.nf4_block_size=64 &&
  fail "LoRA on a 4-bit folder exited 0"
grep -q "model.layers.0.self_attn.q_proj.weight is stored in NF4 (a bitsandbytes 4-bit folder).*only \[peft\] method = \"qlora\"" \
  "$tmp/log" || fail "LoRA on a 4-bit folder: $(grep -m2 -i error "$tmp/log")"
run "$tmp/bnb-64" 2 1 --set "model.path=$tmp/bnb" --set peft.nf4_block_size=64 && fail "another block size on a 4-bit folder exited 0"
grep -q "is stored in NF4 blocks of 32 with double-quantised scales.*but \[peft\] nf4_block_size = 64" "$tmp/log" ||
  fail "the block size of a 4-bit folder: $(grep -m2 -i error "$tmp/log")"
# Maps other than bitsandbytes' own (as its CPU quantisation before 0.50 stored), and FP4: refused, named.
$py - "$tmp/bnb" "$tmp/bnb-map" "$tmp/bnb-fp4" <<'PY'
import shutil, struct, sys
sys.path.insert(0, "tests/cli")
from patch_tensor import patch_tensor
src, bad_map, fp4 = sys.argv[1:4]
for out in (bad_map, fp4):
    shutil.copytree(src, out)
patch_tensor(bad_map, "model.layers.1.mlp.up_proj.weight.nested_quant_map",
             lambda data, begin, end: data.__setitem__(slice(begin, begin + 4), struct.pack("<f", -1.0)))
path = fp4 + "/model.safetensors"
data = open(path, "rb").read().replace(b"bitsandbytes__nf4", b"bitsandbytes__fp4")
open(path, "wb").write(data)
PY
run "$tmp/bnb-map-run" 2 1 --set "model.path=$tmp/bnb-map" && fail "a 4-bit folder with another 8-bit map exited 0"
grep -q "model.layers.1.mlp.up_proj.weight.nested_quant_map in .*: value 0 is -1, bitsandbytes' 8-bit dynamic map has -0.992968738" \
  "$tmp/log" || fail "another 8-bit map: $(grep -m2 -i error "$tmp/log")"
run "$tmp/bnb-fp4-run" 2 1 --set "model.path=$tmp/bnb-fp4" && fail "an FP4 folder exited 0"
grep -q "quant_type fp4: only NF4 bases are supported" "$tmp/log" || fail "FP4: $(grep -m2 -i error "$tmp/log")"

# A NaN in a projection cannot be quantised: named with its element, from the whole model and
# streamed, and nothing is written.
cp -r configs/data/tiny-llama "$tmp/nan-base"
$py - "$tmp/nan-base" <<'PY'
import struct, sys
sys.path.insert(0, "tests/cli")
from patch_tensor import patch_tensor
patch_tensor(sys.argv[1], "model.layers.1.mlp.down_proj.weight",  # element 5 (fp32)
             lambda data, begin, end: data.__setitem__(slice(begin + 20, begin + 24), struct.pack("<f", float("nan"))))
PY
for how in whole streamed; do
  run "$tmp/nan-$how" 2 1 --set "model.path=$tmp/nan-base" --set fsdp.low_cpu_fsdp=$([[ $how == streamed ]] && echo true || echo false) &&
    fail "a NaN weight ($how) exited 0"
  grep -q "weight model.layers.1.mlp.down_proj.weight holds nan at element 5: NF4 quantises finite weights only" "$tmp/log" ||
    fail "a NaN weight ($how) was not named: $(grep -m2 -i 'error\|critical' "$tmp/log")"
  [[ -e "$tmp/nan-$how/checkpoints/latest" ]] && fail "a NaN weight ($how) left a checkpoint"
done

# Another world size: 2 ranks' checkpoint resumed by 3, to the sample 80 steps of 2 ranks reach.
run "$tmp/a" 3 80 || { fail "the resume at 3 ranks failed"; tail -20 "$tmp/log"; }
grep -q "resuming at step 60 " "$tmp/log" || fail "3 ranks did not resume from step 60"
$py - "$tmp/a/metrics.jsonl" <<'PY' || fail "3 ranks did not stop where 80 steps of 2 ranks do"
import json, sys
r = [json.loads(l) for l in open(sys.argv[1]) if '"step":' in l]
width = r[0]["samples"][1] - r[0]["samples"][0]
assert r[-1]["samples"][1] == 80 * width, (r[-1]["samples"], width)
PY

# Another quantisation: refused, the checkpoints untouched.
latest=$(readlink "$tmp/a/checkpoints/latest")
run "$tmp/a" 2 100 --set peft.method=lora --set peft.nf4_block_size=64 && fail "resuming QLoRA adapters as LoRA exited 0"
grep -q "its adapters were trained on an NF4 base (qlora, blocks of 32, double-quantised scales), this job has an unquantised base (lora)" \
  "$tmp/log" || fail "LoRA on a QLoRA checkpoint was not refused with the reason: $(grep -m1 -i error "$tmp/log")"
run "$tmp/a" 2 100 --set peft.nf4_block_size=64 && fail "resuming with another block size exited 0"
grep -q "this job has an NF4 base (qlora, blocks of 64" "$tmp/log" || fail "another block size was not refused"
[[ "$(readlink "$tmp/a/checkpoints/latest")" == "$latest" ]] || fail "a refused resume changed the checkpoints"

# PEFT out; merged onto the dequantised base.
c=$tmp/a/checkpoints/$latest
"$ckpt" inspect "$c" >"$tmp/inspect" 2>&1 || fail "inspect failed: $(cat "$tmp/inspect")"
grep -q "^QLoRA adapters only: r = 8, .* in NF4 (blocks of 32, scales double-quantised)" "$tmp/inspect" ||
  fail "inspect does not show a QLoRA checkpoint as one: $(grep -i lora "$tmp/inspect")"
"$ckpt" export-peft "$c" "$tmp/peft" 2>"$tmp/log" || fail "export-peft failed: $(cat "$tmp/log")"
"$ckpt" merge-lora "$c" configs/data/tiny-llama "$tmp/merged" 2>"$tmp/log" || fail "merge-lora failed: $(cat "$tmp/log")"
grep -q "14 projections as their NF4 values, blocks of 32" "$tmp/log" || fail "merge-lora did not dequantise: $(cat "$tmp/log")"
$py tests/cli/lora_check.py merge configs/data/tiny-llama "$tmp/peft" "$tmp/merged" --nf4 32 true ||
  fail "the merged logits differ from the NF4 base + adapters"

# bitsandbytes' and llama-recipes' spellings.
"$st" validate configs/tiny-qlora.toml --set peft.bnb_4bit_use_double_quant=true >"$tmp/log" 2>&1 && fail "bnb_4bit_use_double_quant was accepted"
grep -q "is \[peft\] nf4_double_quant here" "$tmp/log" || fail "bnb_4bit_use_double_quant: $(cat "$tmp/log")"
"$st" validate configs/tiny-lora.toml --set peft.nf4_block_size=128 >"$tmp/log" 2>&1 && fail "nf4_block_size with lora was accepted"
grep -q "nf4_block_size = 128 is set but \[peft\] method is \"lora\"" "$tmp/log" || fail "nf4_block_size with lora: $(cat "$tmp/log")"
"$st" validate configs/tiny-qlora.toml --set peft.nf4_block_size=48 >"$tmp/log" 2>&1 && fail "nf4_block_size = 48 was accepted"

# An fp32 base trained under bf16 mixed precision: training quantises the bf16-rounded projections
# (as bitsandbytes quantises a model loaded in bf16), and merge-lora and generate quantise the same
# values: the merged folder's logits equal the numpy reference's NF4 of the bf16-rounded base plus
# the adapters, and generation from the checkpoint equals generation from the merged folder.
"$(dirname "$st")/shardtune-make-model" "$tmp/fp32base" --config configs/data/tiny-llama/config.json --dtype fp32 \
  --seed 7 >/dev/null || fail "shardtune-make-model failed"
run "$tmp/fp32q" 2 10 --set "model.path=$tmp/fp32base" --set train.mixed_precision=true ||
  fail "QLoRA on an fp32 base under mixed precision failed: $(tail -3 "$tmp/log")"
c=$tmp/fp32q/checkpoints/step-0000010
"$ckpt" export-peft "$c" "$tmp/fp32-peft" 2>"$tmp/log" || fail "export-peft (fp32 base) failed: $(cat "$tmp/log")"
"$ckpt" merge-lora "$c" "$tmp/fp32base" "$tmp/fp32-merged" 2>"$tmp/log" || fail "merge-lora (fp32 base) failed: $(cat "$tmp/log")"
$py tests/cli/lora_check.py merge "$tmp/fp32base" "$tmp/fp32-peft" "$tmp/fp32-merged" --nf4 32 true --round bf16 ||
  fail "merge-lora did not quantise the bf16 values training quantised"
g1=$("$st" generate "$c" --ids 1,40,41,42 --max-new-tokens 1 --json --json-logits 2>>"$tmp/gen.err")
g2=$("$st" generate "$tmp/fp32-merged" --tokenizer configs/data/tiny-tokenizer/tokenizer.json --ids 1,40,41,42 \
  --max-new-tokens 1 --json --json-logits 2>>"$tmp/gen.err")
$py - "$g1" "$g2" <<'PY' || fail "generate from the QLoRA checkpoint of an fp32 base differs from its merged model"
import json, sys
x, y = (json.loads(a) for a in sys.argv[1:])
scale = max(abs(v) for v in y["logits"][0])
err = max(abs(p - q) for p, q in zip(x["logits"][0], y["logits"][0])) / scale
print(f"fp32 base: generate from the checkpoint vs the merged model: {err:.2e} of the largest logit")
sys.exit(0 if err < 1e-4 else 1)
PY

echo "qlora_test: $failures failure(s)"
[[ $failures -eq 0 ]]
