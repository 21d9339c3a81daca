#!/usr/bin/env bash
# configs/tiny-lora.toml end to end, through `shardtune run` (LoRA on a frozen Hugging Face base):
#  - its loss falls, and its checkpoints hold only the adapters, their AdamW moments and the base's
#    identity (read back by h5py and from the manifest; the weights' digest against
#    tests/cli/weights_identity.py, hashlib over the safetensors files);
#  - a rerun draws the same dropout masks: bitwise the same losses; lora_dropout = 0 changes them;
#  - the base streamed into shards (low_cpu_fsdp) gives bitwise the same losses;
#  - a checkpoint of 2 ranks resumes at 3 ranks and continues, sharded or full (model.h5);
#  - resuming on another base model, or with another rank, is refused with the reason;
#  - export-peft writes a PEFT adapter folder that trains again through [peft] from_peft_checkpoint;
#    merge-lora writes a merged model whose logits equal base + adapters (tests/cli/lora_check.py,
#    the plain-PyTorch reference) and refuses another base; where peft and transformers are
#    installed, peft loads the exported folder and gives the same logits (skipped elsewhere);
#  - llama-recipes' use_peft is refused naming [peft] method.
# usage: lora_test.sh SHARDTUNE SOURCE_DIR SHARDTUNE_CKPT SHARDTUNE_MAKE_MODEL
set -u
st=$1 src=$2 ckpt=$3 make_model=$4
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
py=/usr/bin/python3
export PYTHONDONTWRITEBYTECODE=1
cd "$src" || exit 1

run() {  # run OUT RANKS STEPS [extra --set ...]: the tiny-lora job, validation off
  local out=$1 ranks=$2 steps=$3
  shift 3
  "$st" run configs/tiny-lora.toml -n "$ranks" --set "job.output_dir=$out" --set train.max_train_step="$steps" \
    --set train.run_validation=false --set checkpoint.every_steps=20 "$@" >"$tmp/log" 2>&1
}
losses() { grep '"step":' "$1/metrics.jsonl" | sed 's/.*"loss": \([^,]*\),.*/\1/'; }

# Trains, and the loss falls.
run "$tmp/a" 2 60 || { fail "tiny-lora failed"; tail -20 "$tmp/log"; }
grep -q "trainable (.*LoRA r = 8 on all-linear, lm_head)" "$tmp/log" || fail "the log does not show the LoRA model"
$py - "$tmp/a/metrics.jsonl" <<'PY' || fail "the loss did not fall"
import json, sys
losses = [json.loads(l)["loss"] for l in open(sys.argv[1]) if '"step":' in l]
first, last = sum(losses[:5]) / 5, sum(losses[-5:]) / 5
print(f"tiny-lora: loss {first:.3f} -> {last:.3f} over {len(losses)} steps")
sys.exit(0 if last < 0.75 * first else 1)
PY

# The checkpoint: adapters and their moments only, and the base it needs.
c=$tmp/a/checkpoints/step-0000060
$py - "$c" "$src/configs/data/tiny-llama" "$src/tests/cli" <<'PY' || fail "the adapter checkpoint is not what it should be"
import glob, hashlib, json, sys, h5py
ckpt, base = sys.argv[1], sys.argv[2]
m = json.load(open(ckpt + "/manifest.json"))
names = set(m["tensors"])
assert names and all(".lora_A." in n or ".lora_B." in n for n in names), sorted(names)[:5]
assert len(names) == 2 * (2 * 7 + 1), len(names)  # 2 blocks x 7 projections + the head, A and B each
a = m["adapter"]
assert (a["method"], a["r"], a["alpha"]) == ("lora", 8, 16.0), a
assert a["base_model"]["config_sha256"] == hashlib.sha256(open(base + "/config.json", "rb").read()).hexdigest()
sys.path.insert(0, sys.argv[3])
from weights_identity import identity
assert a["base_model"]["weights_hash"] == "sha256-1MiB-chunks", a["base_model"]
assert a["base_model"]["weights_sha256"] == identity(base), (a["base_model"]["weights_sha256"], identity(base))
kinds = {s["kind"] for s in m["slices"]}
assert kinds == {"param", "exp_avg", "exp_avg_sq"}, kinds
# The files hold nothing but the adapters' slices (each dataset holds a flat shard of them).
held = {(s["file"], s["kind"], s["dataset"]) for s in m["slices"]}
for f in glob.glob(ckpt + "/*.h5"):
    with h5py.File(f, "r") as h:
        for kind in h:
            for d in h[kind]:
                assert (f.rsplit("/", 1)[1], kind, d) in held, (f, kind, d)
print(f"adapter checkpoint: {len(names)} tensors with moments, base {a['base_model']['path']}")
PY

# Dropout: a rerun draws the same masks; without dropout the losses differ (from step 2: B starts at 0).
run "$tmp/a2" 2 10 || fail "the rerun failed"
[[ "$(losses "$tmp/a2")" == "$(losses "$tmp/a" | head -10)" ]] || fail "a rerun gave other losses"
run "$tmp/nodrop" 2 10 --set peft.lora_dropout=0 || fail "the run without dropout failed"
[[ "$(losses "$tmp/nodrop" | head -1)" == "$(losses "$tmp/a" | head -1)" ]] || fail "step 1 differs without dropout"
[[ "$(losses "$tmp/nodrop" | sed -n 3p)" != "$(losses "$tmp/a" | sed -n 3p)" ]] || fail "lora_dropout takes no effect"

# The base streamed into shards (low_cpu_fsdp: no rank holds the whole model): the same losses.
run "$tmp/stream" 2 10 --set fsdp.low_cpu_fsdp=true || fail "the streamed run failed: $(tail -3 "$tmp/log")"
grep -q "streamed the weights into shards" "$tmp/log" || fail "the base was not streamed"
[[ "$(losses "$tmp/stream")" == "$(losses "$tmp/a" | head -10)" ]] || fail "streaming the base changed the losses"
# Streamed, each node's reader hashes what it reads: the same identity, from hashlib alone.
$py - "$tmp/stream/checkpoints/step-0000010" "$src/configs/data/tiny-llama" "$src/tests/cli" <<'PY' || fail "the streamed run recorded another base identity"
import json, sys
sys.path.insert(0, sys.argv[3])
from weights_identity import identity
assert json.load(open(sys.argv[1] + "/manifest.json"))["adapter"]["base_model"]["weights_sha256"] == identity(sys.argv[2])
PY

# A full (consolidated) adapter checkpoint: model.h5 of the adapters alone, resumed by 3 ranks.
run "$tmp/full" 2 10 --set fsdp.checkpoint_type=full --set checkpoint.every_steps=5 || fail "the full-checkpoint run failed"
$py - "$tmp/full/checkpoints/step-0000010" <<'PY' || fail "the full adapter checkpoint is not what it should be"
import json, sys, h5py
m = json.load(open(sys.argv[1] + "/manifest.json"))
assert m["layout"] == "full" and "adapter" in m, m["layout"]
with h5py.File(sys.argv[1] + "/model.h5", "r") as f:
    names = list(f["param"])
    assert len(names) == 30 and all(".lora_" in n for n in names), names[:3]
    assert f["param/lm_head.lora_B.weight"].shape == (558, 8), f["param/lm_head.lora_B.weight"].shape
PY
run "$tmp/full" 3 12 --set fsdp.checkpoint_type=full || fail "resuming the full adapter checkpoint at 3 ranks failed"
grep -q "resuming at step 10 " "$tmp/log" || fail "3 ranks did not resume the full adapter checkpoint"

# Another world size: 2 ranks' checkpoint resumed by 3.
run "$tmp/a" 3 80 || { fail "the resume at 3 ranks failed"; tail -20 "$tmp/log"; }
grep -q "resuming at step 60 " "$tmp/log" || fail "3 ranks did not resume from step 60"
grep -q "job 'tiny-lora': 3 ranks" "$tmp/log" || fail "not 3 ranks"
# max_train_step counts steps of the first start's global batch: 3 ranks stop at the sample that
# 80 steps of 2 ranks reach, in fewer steps of their own.
last=$($py - "$tmp/a/metrics.jsonl" <<'PY'
import json, sys
r = [json.loads(l) for l in open(sys.argv[1]) if '"step":' in l]
width = r[0]["samples"][1] - r[0]["samples"][0]
assert r[-1]["epoch"] == 1 and r[-1]["samples"][1] == 80 * width, (r[-1]["samples"], width)
print(r[-1]["step"])
PY
) || fail "3 ranks did not stop where 80 steps of 2 ranks do"
final=$(printf 'step-%07d' "${last:-0}")
[[ "$(readlink "$tmp/a/checkpoints/latest")" == "$final" ]] || fail "no checkpoint at the last step ($final)"

# Another base, another rank: refused, and the checkpoints untouched.
"$make_model" "$tmp/other-base" --vocab 558 --seed 7 --dtype fp32 >/dev/null || fail "shardtune-make-model failed"
run "$tmp/a" 2 100 --set "model.path=$tmp/other-base" && fail "resuming on another base model exited 0"
grep -q "adapters only resume on the base model they were trained on" "$tmp/log" ||
  fail "another base was not refused with the reason: $(grep -m1 -i error "$tmp/log")"
run "$tmp/a" 2 100 --set peft.lora_r=4 && fail "resuming with another rank exited 0"
grep -q "its LoRA rank is 8, \[peft\] lora_r is 4" "$tmp/log" || fail "another rank was not refused with the reason"
[[ "$(readlink "$tmp/a/checkpoints/latest")" == "$final" ]] || fail "a refused resume changed the checkpoints"

# PEFT out, and in again.
c=$tmp/a/checkpoints/$final
"$ckpt" export-peft "$c" "$tmp/peft" 2>"$tmp/log" || fail "export-peft failed: $(cat "$tmp/log")"
$py - "$tmp/peft" <<'PY' || fail "the PEFT folder is not PEFT's layout"
import json, sys
c = json.load(open(sys.argv[1] + "/adapter_config.json"))
assert (c["peft_type"], c["task_type"], c["r"], c["lora_alpha"]) == ("LORA", "CAUSAL_LM", 8, 16.0), c
assert sorted(c["target_modules"]) == sorted(["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj",
                                              "down_proj", "lm_head"]), c["target_modules"]
PY
run "$tmp/from-peft" 2 1 --set "peft.from_peft_checkpoint=$tmp/peft" --set train.lr=1e-12 --set peft.lora_dropout=0 ||
  fail "training from the PEFT folder failed: $(tail -3 "$tmp/log")"
grep -q "LoRA adapters from $tmp/peft" "$tmp/log" || fail "the adapters did not come from the PEFT folder"
"$ckpt" diff --params-only "$c" "$tmp/from-peft/checkpoints/step-0000001" >"$tmp/diff" 2>&1
$py - "$tmp/diff" <<'PY' || fail "the adapters trained from the PEFT folder are not the exported ones: $(tail -3 "$tmp/diff")"
import re, sys
worst = max(float(x) for x in re.findall(r"max abs ([0-9.e+-]+)", open(sys.argv[1]).read()) or ["inf"])
print(f"adapters after one step at lr 1e-12 from the exported folder: largest difference {worst:.2e}")
sys.exit(0 if worst < 1e-6 else 1)
PY
"$st" run configs/tiny-lora.toml --set "job.output_dir=$tmp/bad" --set peft.lora_r=4 \
  --set "peft.from_peft_checkpoint=$tmp/peft" >"$tmp/log" 2>&1 && fail "an adapter folder of another rank was accepted"
grep -q "its r is 8, \[peft\] lora_r is 4" "$tmp/log" || fail "the rank mismatch of the PEFT folder was not named"

# Merged: base + adapters in one model, and only onto its own base.
"$ckpt" merge-lora "$c" configs/data/tiny-llama "$tmp/merged" 2>"$tmp/log" || fail "merge-lora failed: $(cat "$tmp/log")"
$py tests/cli/lora_check.py merge configs/data/tiny-llama "$tmp/peft" "$tmp/merged" || fail "the merged logits differ"
# Where peft and transformers are installed, peft loads the exported folder and agrees.
$py tests/cli/lora_check.py peft configs/data/tiny-llama "$tmp/peft"
case $? in 0) ;; 77) echo "peft check skipped: peft or transformers not installed" ;; *) fail "peft's logits differ" ;; esac
"$ckpt" merge-lora "$c" "$tmp/other-base" "$tmp/merged2" 2>"$tmp/log" && fail "merge-lora onto another base exited 0"
grep -q "is not the base model the adapters of" "$tmp/log" || fail "merge-lora onto another base: $(cat "$tmp/log")"
# A base that differs from the real one only after the first 64 bytes of one tensor: every byte
# counts, for merge-lora (which writes nothing) and for a resume.
cp -r configs/data/tiny-llama "$tmp/late-base"
$py - "$tmp/late-base" <<'PY'
import sys
sys.path.insert(0, "tests/cli")
from patch_tensor import patch_tensor
def flip(data, begin, end):
    data[end - 2] ^= 0x40  # the tensor's last element, far past its first 64 bytes
patch_tensor(sys.argv[1], "model.layers.1.mlp.down_proj.weight", flip)
PY
"$ckpt" merge-lora "$c" "$tmp/late-base" "$tmp/merged3" 2>"$tmp/log" && fail "merge-lora onto a base changed late exited 0"
grep -q "weights SHA-256 (every byte)" "$tmp/log" || fail "the late change was not found by the digest: $(cat "$tmp/log")"
ls -d "$tmp"/merged3* >/dev/null 2>&1 && fail "a refused merge left files behind: $(ls -d "$tmp"/merged3*)"
run "$tmp/a" 2 100 --set "model.path=$tmp/late-base" && fail "resuming on a base changed late exited 0"
grep -q "weights SHA-256 (every byte)" "$tmp/log" || fail "a resume on a base changed late was not refused by the digest"
# OUT appears whole or not at all: a write that fails half way (a file size limit standing in for a
# full disk) leaves nothing, and the rerun then succeeds.
(ulimit -f 64; trap '' XFSZ; "$ckpt" merge-lora "$c" configs/data/tiny-llama "$tmp/merged4" 2>"$tmp/log") &&
  fail "merge-lora past a file size limit exited 0"
ls -d "$tmp"/merged4* >/dev/null 2>&1 && fail "a failed merge left a partial folder: $(ls -d "$tmp"/merged4*)"
"$ckpt" merge-lora "$c" configs/data/tiny-llama "$tmp/merged4" 2>"$tmp/log" || fail "merge-lora after a failed one: $(cat "$tmp/log")"
(ulimit -f 64; trap '' XFSZ; "$ckpt" export-peft "$c" "$tmp/peft2" 2>"$tmp/log")
ls -d "$tmp"/peft2.tmp-* >/dev/null 2>&1 && fail "export-peft left a temporary folder"
"$ckpt" export-hf "$c" "$tmp/hf" 2>"$tmp/log" && fail "export-hf of adapters exited 0"
grep -q "holds LoRA adapters, not a whole model: export-peft" "$tmp/log" || fail "export-hf of adapters: $(cat "$tmp/log")"

# llama-recipes' spelling.
"$st" validate configs/tiny-lora.toml --set train.use_peft=true >"$tmp/log" 2>&1 && fail "use_peft was accepted"
grep -q "use_peft is \[peft\] method here" "$tmp/log" || fail "use_peft not refused with [peft] method: $(cat "$tmp/log")"

echo "lora_test: $failures failure(s)"
[[ $failures -eq 0 ]]
