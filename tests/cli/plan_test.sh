#!/usr/bin/env bash
# `shardtune plan`:
#  - its parts, for the tiny Llama of configs/data/tiny-llama at 4 ranks, equal the arithmetic done
#    here from config.json: parameters, gradients and AdamW's moments of a full fine-tune sharded 4
#    ways in fp32, and of LoRA (adapters counted module by module; the base in bf16 under mixed
#    precision), and of QLoRA (NF4 records per projection, each tensor in whole records);
#  - Llama 3.1 70B over 32 GPUs does not fit 40 GiB: every change it lists, applied with its own
#    --set overrides, is planned again and fits; Llama 2 70B LoRA on 4 x 24 GB does not fit, and
#    QLoRA is listed as a change that does (and fits when applied);
#  - a real 2-rank run's largest per-step peak RSS (0.1B, LoRA; and fully fine-tuned with AdamW and
#    with 8-bit AdamW) is within 15% of the plan;
#  - with activation checkpointing, the plan names the most blocks that could keep their activations
#    within 90% of the GPU (the most that fit, one more does not), and `submit` says so too;
#  - `shardtune submit --dry-run` warns about a GPU job that will not fit ([launch] gpu_memory_gib),
#    and about one that names no GPU memory to check against;
#  - every job file in configs/ fits the GPUs it names (NCCL's buffers planned), or this machine;
#  - a CPU job's node: its ranks x the larger of training and loading, against --node-memory or this
#    machine's MemTotal, with the changes that make a rank's share fit when they do not; `run` warns
#    before starting ranks that exceed this machine's available memory;
#  - a --gpu-memory or --node-memory that is not a size, and a model without config.json, are clear errors.
# usage: plan_test.sh SHARDTUNE SOURCE_DIR
set -u
st=$1 src=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
cd "$src" || exit 1
py=/usr/bin/python3

cat >"$tmp/job.toml" <<TOML
[job]
name = "plan"
[slurm]
ntasks_per_node = 4
[launch]
launcher = "mpirun"
collective_timeout_s = 120.0
device = "cpu"
[model]
path = "configs/data/tiny-llama"
[data]
format = "synthetic"
[train]
batch_size_training = 4
context_length = 64
num_epochs = 1
max_train_step = 4
mixed_precision = false
run_validation = false
[checkpoint]
every_steps = 0
[metrics]
log_every_steps = 1
TOML

"$st" plan "$tmp/job.toml" --json >"$tmp/full.json" || fail "plan --json failed"
"$st" plan "$tmp/job.toml" --json --set peft.method=lora --set train.mixed_precision=true \
  --set 'peft.target_modules=["q_proj", "down_proj"]' --set peft.lora_r=4 >"$tmp/lora.json" || fail "plan of LoRA failed"
$py - "$tmp/full.json" "$tmp/lora.json" configs/data/tiny-llama/config.json <<'PY' || fail "the plan's parts are not the arithmetic"
import json, math, sys
full, lora, c = (json.load(open(p)) for p in sys.argv[1:4])
d, L, V, F = c["hidden_size"], c["num_hidden_layers"], c["vocab_size"], c["intermediate_size"]
q, kv = c["num_attention_heads"] * c["head_dim"], c["num_key_value_heads"] * c["head_dim"]
block = 2 * d * q + 2 * d * kv + 3 * d * F + 2 * d
P = V * d + L * block + d + (0 if c["tie_word_embeddings"] else V * d)
parts = full["parts_bytes"]
assert full["parameters"] == P and full["trainable"] == P and full["shard_size"] == 4, full
for key, want in (("parameters", P / 4 * 4), ("gradients", P / 4 * 4), ("optimizer states", 2 * P / 4 * 4)):
    assert math.isclose(parts[key], want), (key, parts[key], want)
assert math.isclose(full["total_bytes"], sum(parts.values())), full
r = 4
adapters = L * r * ((d + q) + (F + d))  # q_proj: d -> q; down_proj: F -> d
assert lora["trainable"] == adapters, (lora["trainable"], adapters)
lp = lora["parts_bytes"]
assert math.isclose(lp["parameters"], P / 4 * 2 + adapters / 4 * 4), lp
assert math.isclose(lp["optimizer states"], 2 * adapters / 4 * 4), lp
print(f"plan arithmetic: {P} parameters, LoRA {adapters} trainable")
PY
# QLoRA: the blocks' projections as NF4 records (256 blocks of 64 per record of 8,456 bytes with
# double quantisation, each tensor in whole records), the rest of the base in bf16.
"$st" plan "$tmp/job.toml" --json --set peft.method=qlora --set train.mixed_precision=true \
  --set 'peft.target_modules=["q_proj", "down_proj"]' --set peft.lora_r=4 >"$tmp/qlora.json" || fail "plan of QLoRA failed"
$py - "$tmp/lora.json" "$tmp/qlora.json" configs/data/tiny-llama/config.json <<'PY' || fail "the QLoRA plan is not the arithmetic"
import json, math, sys
lora, qlora, c = (json.load(open(p)) for p in sys.argv[1:4])
d, L, V, F = c["hidden_size"], c["num_hidden_layers"], c["vocab_size"], c["intermediate_size"]
q, kv = c["num_attention_heads"] * c["head_dim"], c["num_key_value_heads"] * c["head_dim"]
tensors = [d * q, d * kv, d * kv, q * d, d * F, d * F, F * d]
records = sum(math.ceil(n / (64 * 256)) for n in tensors) * (64 * 256 // 2 + 256 + 8)
projections = sum(tensors)
P = lora["parameters"]
adapters = lora["trainable"]
assert qlora["parameters"] == P and qlora["trainable"] == adapters, qlora
want = (P - adapters - L * projections) / 4 * 2 + L * records / 4 + adapters / 4 * 4
assert math.isclose(qlora["parts_bytes"]["parameters"], want), (qlora["parts_bytes"]["parameters"], want)
assert "NF4 dequantisation" in qlora["parts_bytes"], qlora["parts_bytes"]
print(f"QLoRA plan: {L * records} bytes of NF4 records for {L * projections} projection weights")
PY

"$st" plan configs/llama3-70b-fsdp.toml --model-config tests/fixtures/hf_configs/llama-3.1-70b.json --gpu-memory 40GiB \
  --json >"$tmp/70b.json" || fail "plan of 70B failed"
"$st" plan configs/llama3-70b-fsdp.toml --model-config tests/fixtures/hf_configs/llama-3.1-70b.json \
  --gpu-memory 40GiB >"$tmp/70b.txt" || fail "plan of 70B failed"
grep -q "^does not fit: " "$tmp/70b.txt" || fail "70B on 40 GiB: $(head -20 "$tmp/70b.txt")"
grep -q "^changes that make it fit:" "$tmp/70b.txt" || fail "70B on 40 GiB lists no change"
$py - "$tmp/70b.json" >"$tmp/changes" <<'PY' || fail "70B on 40 GiB: the plan says it fits, or lists no change"
import json, sys
plan = json.load(open(sys.argv[1]))
assert plan["fits"] is False and plan["changes"], plan
for c in plan["changes"]:
    print(" ".join("--set " + o for o in c["overrides"]))
PY
while read -r sets; do
  # shellcheck disable=SC2086
  "$st" plan configs/llama3-70b-fsdp.toml --model-config tests/fixtures/hf_configs/llama-3.1-70b.json \
    --gpu-memory 40GiB $sets >"$tmp/changed.txt" 2>&1 || { fail "plan with $sets failed: $(tail -3 "$tmp/changed.txt")"; continue; }
  grep -q "^fits: " "$tmp/changed.txt" || fail "the suggested $sets does not fit: $(tail -3 "$tmp/changed.txt")"
done <"$tmp/changes"
echo "70B on 40 GiB: $(wc -l <"$tmp/changes") change(s) listed, each planned again and fitting"

# Blocks exempt from activation checkpointing (fsdp.uncheckpointed_blocks): Llama 3.2 1B on one
# GPU, micro-batch 16 x 2048 tokens. The plan names the most blocks that keep their activations
# within 90% of the GPU: that many are within it, one more is not; without checkpointing, a GPU it
# does not fit is offered checkpointing of as few blocks as fit, which fits when applied.
cat >"$tmp/1b.toml" <<TOML
[job]
name = "plan-1b"
[slurm]
gpus_per_node = 1
[launch]
device = "cuda"
[model]
path = "/models/Llama-3.2-1B"
[data]
format = "synthetic"
[train]
batch_size_training = 16
context_length = 2048
mixed_precision = true
[fsdp]
activation_checkpointing = true
TOML
one_b=("$tmp/1b.toml" --model-config tests/fixtures/hf_configs/llama-3.2-1b.json)
plan_1b() { "$st" plan "${one_b[@]}" "$@"; }
if plan_1b --gpu-memory 48GiB --json >"$tmp/1b.json" && plan_1b --gpu-memory 48GiB >"$tmp/1b.txt"; then
  kept=$($py -c 'import json, sys; print(json.load(open(sys.argv[1]))["uncheckpointed_blocks_that_fit"])' "$tmp/1b.json")
  grep -q "^faster, within 90% of it: the last $kept of 16 blocks keeping their activations, .* (--set fsdp.uncheckpointed_blocks=$kept)" \
    "$tmp/1b.txt" || fail "the plan of 1B on 48 GiB names no faster setting: $(tail -3 "$tmp/1b.txt")"
  plan_1b --json --set fsdp.uncheckpointed_blocks="$kept" >"$tmp/1b-k.json" &&
    plan_1b --json --set fsdp.uncheckpointed_blocks=$((kept + 1)) >"$tmp/1b-k1.json" &&
    plan_1b --json --set fsdp.activation_checkpointing=false >"$tmp/1b-off.json" ||
    fail "plans of 1B with blocks exempt failed"
  $py - "$tmp/1b-k.json" "$tmp/1b-k1.json" "$tmp/1b-off.json" "$kept" <<'PY' || fail "1B: $kept exempt blocks is not the most that fit"
import json, sys
k, k1, off = (json.load(open(p))["total_bytes"] for p in sys.argv[1:4])
kept, limit = int(sys.argv[4]), 0.9 * 48 * 2**30
assert 0 < kept < 16, kept
assert k <= limit < k1 < off, (k, limit, k1, off)
print(f"1B on 48 GiB: the last {kept} of 16 blocks exempt from checkpointing plan {k / 2**30:.2f} GiB, "
      f"{kept + 1} plan {k1 / 2**30:.2f} GiB, no checkpointing {off / 2**30:.2f} GiB")
PY
  plan_1b --gpu-memory 48GiB --set fsdp.activation_checkpointing=false --json >"$tmp/1b-change.json" ||
    fail "plan of 1B without checkpointing failed"
  sets=$($py -c '
import json, sys
plan = json.load(open(sys.argv[1]))
assert not plan["fits"], plan["total_bytes"]
c = next(c for c in plan["changes"] if c["change"].startswith("activation checkpointing of the first "))
print(" ".join("--set " + o for o in c["overrides"]))' "$tmp/1b-change.json") ||
    fail "1B without checkpointing on 48 GiB: no change that checkpoints some blocks"
  # shellcheck disable=SC2086
  plan_1b --gpu-memory 48GiB $sets | grep -q "^fits: " || fail "1B with $sets does not fit 48 GiB"
else
  fail "plan of 1B failed: $(tail -3 "$tmp/1b.txt")"
fi

# Llama 3 70B QLoRA on 24 GB GPUs (docs/planner.md, beside the published figures of
# ../shared/reference/qlora-nf4.md): 2 GPUs at batch 2, sequence 2048, fit only with the base
# offloaded (cpu_offload and offload_params), which the plan suggests; 4 GPUs at batch 1,
# sequence 3072 fit either way. With offload the GPU holds no shard, gradient or optimizer state:
# its plan drops exactly the offload_bytes it reports as host memory, less the staging of the
# adapters' copies up.
q70=(configs/llama3-70b-qlora.toml --model-config tests/fixtures/hf_configs/llama-3.1-70b.json --set slurm.nodes=1
     --node-memory 256GiB)
off=(--set fsdp.cpu_offload=true --set fsdp.offload_params=true)
two=(--set slurm.gpus_per_node=2 --set train.batch_size_training=2 --set train.context_length=2048)
four=(--set slurm.gpus_per_node=4 --set train.batch_size_training=1 --set train.context_length=3072)
"$st" plan "${q70[@]}" "${two[@]}" --json >"$tmp/q70-2.json" && "$st" plan "${q70[@]}" "${two[@]}" "${off[@]}" --json \
  >"$tmp/q70-2-off.json" && "$st" plan "${q70[@]}" "${four[@]}" "${off[@]}" --json >"$tmp/q70-4-off.json" ||
  fail "plans of 70B QLoRA failed"
$py - "$tmp/q70-2.json" "$tmp/q70-2-off.json" "$tmp/q70-4-off.json" <<'PY' || fail "70B QLoRA with offload is not planned to fit 24 GB GPUs"
import json, math, sys
plain, two, four = (json.load(open(p)) for p in sys.argv[1:])
assert not plain["fits"], plain["total_bytes"]
assert any("fsdp.offload_params=true" in c["overrides"] for c in plain["changes"]), plain["changes"]
for p in (two, four):
    assert p["fits"] and p["offload_bytes"] > 0, p
    for part in ("parameters", "gradients", "optimizer states"):
        assert p["parts_bytes"][part] == 0, (part, p["parts_bytes"])
    assert p["node_fits"], p
# The adapters' shards come up through an fp32 staging copy on the device, which offload adds.
staged = two["parts_bytes"].get("offload staging", 0)
assert 0 < staged < 2**24, two["parts_bytes"]  # a few MiB: the largest unit's adapters
assert math.isclose(plain["total_bytes"] - two["total_bytes"], two["offload_bytes"] - staged), (plain["total_bytes"], two)
print(f"70B QLoRA + offload: 2 x 24 GB {two['total_bytes'] / 2**30:.2f} GiB a GPU (without offload "
      f"{plain['total_bytes'] / 2**30:.2f}), {two['node_host_bytes'] / 2**30:.1f} GiB of host memory; 4 x 24 GB "
      f"{four['total_bytes'] / 2**30:.2f} GiB a GPU, {four['node_host_bytes'] / 2**30:.1f} GiB of host memory")
PY

# Llama 2 70B LoRA on one node of 4 x 24 GB: the bf16 base does not fit, and QLoRA is what makes it.
"$st" plan configs/llama3-70b-qlora.toml --model-config tests/fixtures/hf_configs/llama-2-70b.json --set peft.method=lora \
  --set slurm.nodes=1 --set slurm.gpus_per_node=4 --gpu-memory 24GiB >"$tmp/qlora70b.txt" 2>&1 || fail "plan of 70B LoRA failed"
grep -q "^does not fit: " "$tmp/qlora70b.txt" || fail "70B LoRA on 4 x 24 GB fits: $(tail -5 "$tmp/qlora70b.txt")"
grep -q "QLoRA (the base's projections in 4-bit NF4.*(--set peft.method=qlora)" "$tmp/qlora70b.txt" ||
  fail "QLoRA was not suggested for 70B LoRA on 4 x 24 GB: $(tail -5 "$tmp/qlora70b.txt")"
"$st" plan configs/llama3-70b-qlora.toml --model-config tests/fixtures/hf_configs/llama-2-70b.json \
  --set slurm.nodes=1 --set slurm.gpus_per_node=4 --gpu-memory 24GiB >"$tmp/qlora70b.txt" 2>&1
grep -q "^fits: " "$tmp/qlora70b.txt" || fail "the suggested QLoRA does not fit: $(tail -3 "$tmp/qlora70b.txt")"

# A base folder stored in 4 bits (bitsandbytes) loads only streamed, whatever low_cpu_fsdp says: the
# plan of its loading is low_cpu_fsdp's, not every rank holding the whole model in fp32.
$py - tests/fixtures/hf_configs/llama-2-70b.json "$tmp/bnb70b.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
c["quantization_config"] = {"quant_method": "bitsandbytes", "load_in_4bit": True, "bnb_4bit_quant_type": "nf4"}
json.dump(c, open(sys.argv[2], "w"))
PY
for variant in plain:llama-2-70b.json:false bnb:bnb70b.json:false streamed:llama-2-70b.json:true; do
  IFS=: read -r name file stream <<<"$variant"
  dir=tests/fixtures/hf_configs; [ "$name" = bnb ] && dir=$tmp
  "$st" plan configs/llama3-70b-qlora.toml --model-config "$dir/$file" --set fsdp.low_cpu_fsdp=$stream \
    --set fsdp.low_cpu_fsdp_min_params=0 --set slurm.nodes=1 --set slurm.gpus_per_node=4 --json >"$tmp/load-$name.json" ||
    fail "the $name QLoRA plan failed"
done
$py - "$tmp"/load-{plain,bnb,streamed}.json <<'PY' || fail "a 4-bit base folder is not planned as streamed"
import json, sys
plain, bnb, streamed = (json.load(open(f))["loading_bytes"] for f in sys.argv[1:])
print(f"70B QLoRA loading per rank: whole model {plain / 2**30:.1f} GiB, 4-bit folder {bnb / 2**30:.1f} GiB, "
      f"streamed {streamed / 2**30:.1f} GiB")
assert bnb == streamed and plain > 8 * streamed
PY

# The plan against a real run, for the largest rank: a 0.1B model (hidden 1024, 4 blocks,
# vocabulary 32000) with LoRA r = 16 on every projection, 2 ranks of 2 x 256 tokens, whose
# tensors, not the runtime, make up most of a rank's memory. On glibc's malloc this rank's heap
# grew to 1.33 times the plan (0.747, bench/plan.sh); the ranks' tcmalloc holds it to the plan.
"$(dirname "$st")/shardtune-make-model" "$tmp/mid" --hidden 1024 --layers 4 --intermediate 2816 --vocab 32000 \
  --dtype bf16 >/dev/null || fail "shardtune-make-model failed"
mid=(--set "model.path=$tmp/mid" --set peft.method=lora --set 'peft.target_modules=["all-linear"]' --set peft.lora_r=16
     --set train.batch_size_training=2 --set train.context_length=256 --set train.max_train_step=3
     --set fsdp.low_cpu_fsdp=true)
OMP_NUM_THREADS=1 "$st" run "$tmp/job.toml" -n 2 --set "job.output_dir=$tmp/run" "${mid[@]}" >"$tmp/run.log" 2>&1 ||
  fail "the run failed: $(tail -5 "$tmp/run.log")"
"$st" plan "$tmp/job.toml" --set slurm.ntasks_per_node=2 "${mid[@]}" --json >"$tmp/two.json"
$py - "$tmp/run/metrics.jsonl" "$tmp/two.json" <<'PY' || fail "the plan is more than 15% off the largest rank's peak"
import json, sys
steps = [json.loads(l) for l in open(sys.argv[1]) if '"step":' in l][1:]  # step 2 on, as bench/plan.sh
measured = max(r["peak_rss_bytes"] for r in steps)
predicted = json.load(open(sys.argv[2]))["total_bytes"]
print(f"0.1B LoRA, 2 ranks: planned {predicted / 2**20:.0f} MiB, measured {measured / 2**20:.0f} MiB ({predicted / measured:.3f})")
assert len(steps) == 2 and abs(predicted / measured - 1) <= 0.15
PY

# A full fine-tune of the same model with each optimizer, where the optimizer state is a third of
# the rank (fp32 AdamW), a tenth (8-bit AdamW) or almost nothing (Adafactor without a first
# moment), and AdamW with cpu_offload (on the CPU the same memory): each within 15% of its plan.
for optimizer in adamw adamw_8bit adafactor adamw-offload; do
  extra=()
  [ "$optimizer" = adamw-offload ] && extra=(--set fsdp.cpu_offload=true)
  full=(--set "model.path=$tmp/mid" --set train.optimizer=${optimizer%-offload} "${extra[@]}" --set train.batch_size_training=1
        --set train.context_length=128 --set train.max_train_step=3 --set fsdp.low_cpu_fsdp=true)
  OMP_NUM_THREADS=1 "$st" run "$tmp/job.toml" -n 2 --set "job.output_dir=$tmp/full-$optimizer" "${full[@]}" \
    >"$tmp/full-$optimizer.log" 2>&1 || fail "the $optimizer run failed: $(tail -5 "$tmp/full-$optimizer.log")"
  "$st" plan "$tmp/job.toml" --set slurm.ntasks_per_node=2 "${full[@]}" --json >"$tmp/full-$optimizer.json"
  $py - "$tmp/full-$optimizer/metrics.jsonl" "$tmp/full-$optimizer.json" "$optimizer" <<'PY' ||
import json, sys
steps = [json.loads(l) for l in open(sys.argv[1]) if '"step":' in l][1:]  # step 2 on, as above
measured = max(r["peak_rss_bytes"] for r in steps)
plan = json.load(open(sys.argv[2]))
predicted = plan["total_bytes"]
state = plan["parts_bytes"]["optimizer states"]
print(f"0.1B full fine-tune with {sys.argv[3]}, 2 ranks: planned {predicted / 2**20:.0f} MiB (optimizer states "
      f"{state / 2**20:.0f} MiB), measured {measured / 2**20:.0f} MiB ({predicted / measured:.3f})")
assert len(steps) == 2 and abs(predicted / measured - 1) <= 0.15
PY
    fail "the plan of the $optimizer full fine-tune is more than 15% off the largest rank's peak"
done

# submit warns about a GPU job that will not fit.
"$st" submit configs/llama3-70b-fsdp.toml --dry-run --set launch.gpu_memory_gib=1 --set "model.path=$src/configs/data/tiny-llama" \
  --set fsdp.activation_checkpointing=false --set train.batch_size_training=64 >"$tmp/submit.out" 2>"$tmp/submit.err" ||
  fail "submit --dry-run failed: $(cat "$tmp/submit.err")"
grep -q "warning: the job will not fit its GPUs' memory (\[launch\] gpu_memory_gib = 1)" "$tmp/submit.err" ||
  fail "submit did not warn: $(head -5 "$tmp/submit.err")"
grep -q "^#SBATCH" "$tmp/submit.out" || fail "submit --dry-run did not print the script after warning"

# submit tells a GPU job that fits with room to spare that fewer blocks need recomputing: the tiny
# model on 80 GiB needs no activation checkpointing at all.
"$st" submit configs/llama3-70b-fsdp.toml --dry-run --set launch.gpu_memory_gib=80 --set "model.path=$src/configs/data/tiny-llama" \
  >"$tmp/submit.out" 2>"$tmp/submit.err" || fail "submit --dry-run failed: $(cat "$tmp/submit.err")"
grep -q "note: the job fits its GPUs' memory (\[launch\] gpu_memory_gib = 80) with room for fewer blocks recomputed; faster, .*(--set fsdp.activation_checkpointing=false)" \
  "$tmp/submit.err" || fail "submit did not name the faster setting: $(head -5 "$tmp/submit.err")"
grep -q "will not fit" "$tmp/submit.err" && fail "submit warned that a fitting job will not fit"

# submit warns about a GPU job that names no GPU memory: nothing could check it.
"$st" submit configs/llama3-70b-fsdp.toml --dry-run --set launch.gpu_memory_gib=0 --set "model.path=$src/configs/data/tiny-llama" \
  >"$tmp/submit.out" 2>"$tmp/submit.err" || fail "submit --dry-run failed: $(cat "$tmp/submit.err")"
grep -q "warning: no \[launch\] gpu_memory_gib, so nothing checks that the job fits its GPUs" "$tmp/submit.err" ||
  fail "submit did not warn about a GPU job without gpu_memory_gib: $(head -5 "$tmp/submit.err")"

# Every shipped job file fits what it runs on: the GPUs its [launch] gpu_memory_gib names (which
# every GPU job names), or this machine for the CPU ones. Models not on this machine are planned
# from the fixture config.json of the same shapes.
for f in configs/*.toml; do
  case $(grep -m1 '^path = ' "$f") in
    *70B*) extra=(--model-config tests/fixtures/hf_configs/llama-3.1-70b.json) ;;
    *8B*) extra=(--model-config tests/fixtures/hf_configs/llama-3-8b.json) ;;
    *tiny-chat/hf*) extra=(--model-config configs/data/tiny-llama/config.json) ;;  # made by configs/tiny-chat.toml
    *) extra=() ;;
  esac
  # At its node count, and at min_nodes, where a node loss may resume it.
  min=$(grep -m1 '^min_nodes = ' "$f" | sed 's/^min_nodes = \([0-9]*\).*/\1/')
  if [ -n "$min" ]; then
    "$st" plan "$f" "${extra[@]}" --set "slurm.nodes=$min" --json >"$tmp/shipped.json" 2>"$tmp/shipped.err" ||
      { fail "plan $f at min_nodes: $(cat "$tmp/shipped.err")"; continue; }
    $py -c 'import json,sys; p=json.load(open(sys.argv[1])); sys.exit(0 if p["fits"] else 1)' "$tmp/shipped.json" ||
      fail "$f does not fit its GPUs on min_nodes = $min nodes"
  fi
  "$st" plan "$f" "${extra[@]}" --json >"$tmp/shipped.json" 2>"$tmp/shipped.err" || { fail "plan $f: $(cat "$tmp/shipped.err")"; continue; }
  $py - "$f" "$tmp/shipped.json" <<'PY' || fail "$f does not fit what it names"
import json, sys
name, plan = sys.argv[1], json.load(open(sys.argv[2]))
if plan["memory"] == "gpu":
    assert plan.get("limit_bytes"), f"{name}: a GPU job without [launch] gpu_memory_gib"
    assert "NCCL buffers" in plan["parts_bytes"] or plan["world_size"] == 1, plan["parts_bytes"]
    ok, used = plan["fits"], plan["total_bytes"] / plan["limit_bytes"]
else:
    ok, used = plan["node_fits"], plan["node_host_bytes"] / plan["node_memory_bytes"]
print(f"{name}: {plan['memory']} memory {used:.0%} of what it names")
sys.exit(0 if ok else 1)
PY
done

# A CPU job's node: 4 ranks of the tiny model fit 1 TiB, not 100 MiB.
"$st" plan "$tmp/job.toml" --json --node-memory 1TiB >"$tmp/node_big.json" || fail "plan --node-memory 1TiB failed"
"$st" plan "$tmp/job.toml" --json --node-memory 100MiB >"$tmp/node_small.json" || fail "plan --node-memory 100MiB failed"
$py - "$tmp/node_big.json" "$tmp/node_small.json" <<'PY' || fail "the node's memory is not 4 ranks x the larger of training and loading"
import json, math, sys
big, small = (json.load(open(p)) for p in sys.argv[1:3])
assert big["ranks_per_node"] == 4, big
want = 4 * max(big["total_bytes"], big["loading_bytes"])
assert math.isclose(big["node_host_bytes"], want), (big["node_host_bytes"], want)
assert big["node_memory_bytes"] == 2**40 and big["node_fits"] is True, big
assert small["node_memory_bytes"] == 100 * 2**20 and small["node_fits"] is False, small
print(f"node: 4 ranks x {want / 4 / 2**20:.0f} MiB")
PY
"$st" plan "$tmp/job.toml" --node-memory 100MiB >"$tmp/node_small.txt" || fail "plan --node-memory 100MiB failed"
grep -q "^host memory of a node: 4 rank(s) x .* of --node-memory's 0.10 GiB: does not fit" "$tmp/node_small.txt" ||
  fail "100 MiB node: $(grep -i node "$tmp/node_small.txt")"
grep -q "^does not fit: .* 0.02 GiB per rank" "$tmp/node_small.txt" || fail "100 MiB node: no rank's share: $(tail -4 "$tmp/node_small.txt")"
"$st" plan "$tmp/job.toml" >"$tmp/node_here.txt" || fail "plan failed"
grep -q "^host memory of a node: 4 rank(s) x .* of this machine's .* GiB (MemTotal): fits" "$tmp/node_here.txt" ||
  fail "this machine: $(grep -i node "$tmp/node_here.txt")"
# run warns before starting ranks that this machine cannot hold (mpirun then fails on a bad option).
"$st" run "$tmp/job.toml" -n 2 --set "job.output_dir=$tmp/huge" --set train.batch_size_training=100000 \
  --set 'launch.extra_mpirun_options=["--no-such-mpirun-option"]' >"$tmp/huge.log" 2>&1 && fail "a run with a bad mpirun option succeeded"
grep -q "warning: the 2 rank(s) need about .* GiB of host memory at their peak .* and this machine has .* GiB available" \
  "$tmp/huge.log" || fail "run did not warn about its ranks' memory: $(head -5 "$tmp/huge.log")"
"$st" plan "$tmp/job.toml" --node-memory lots >"$tmp/err" 2>&1 && fail "--node-memory lots was accepted"
grep -q 'is not a size like 256GiB' "$tmp/err" || fail "bad --node-memory: $(cat "$tmp/err")"
"$st" plan "$tmp/job.toml" --gpu-memory "80 elephants" >"$tmp/err" 2>&1 && fail "--gpu-memory '80 elephants' was accepted"
grep -q 'is not a size like 80GiB' "$tmp/err" || fail "bad --gpu-memory: $(cat "$tmp/err")"
"$st" plan "$tmp/job.toml" --set "model.path=$tmp/nowhere" >"$tmp/err" 2>&1 && fail "a model without config.json was planned"
grep -q "$tmp/nowhere/config.json" "$tmp/err" || fail "missing config.json: $(cat "$tmp/err")"

[ "$failures" -eq 0 ] && echo "plan_test: all checks passed"
exit $((failures > 0))
