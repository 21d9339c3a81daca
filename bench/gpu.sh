#!/usr/bin/env bash
# shardtune against PyTorch on one GPU, in the same run: Llama 3.2 1B shapes (random weights
# made by shardtune-make-model), sequence 2048, bf16 mixed precision over fp32 masters, FULL_SHARD
# at world size 1, with and without activation checkpointing, at the largest micro-batch that
# fits shardtune. For each: tokens/s, MFU by torchtitan's formula (6·N + 12·L·H·Q·T FLOPs per
# token) against the GPU's bf16 dense peak and against a bf16 matmul measured on the same GPU,
# peak GPU memory; PyTorch FSDP2 (fully_shard) eager and with torch.compile at the same micro-batch,
# and the ratios, PyTorch with shardtune's attention kernel (flash) and with its own choice (each
# row lists the attention kernels it ran), its AdamW fused with shardtune's hyper-parameters, both
# clocks read around the whole step with the device idle. shardtune's attention is its training's
# choice per shape (cuDNN's where it timed faster); also shardtune with cuDNN's attention left out
# (flash, like for like with PyTorch's flash rows, and what the choice is worth); packed rows
# (per-document attention) against one document per row at equal tokens; shardtune with AdamW an
# operation at a time (what its fused AdamW is worth), with LibTorch's fused AdamW kernel instead
# of its own (what that kernel is worth), and with each fused kernel turned off in turn (what each
# is worth); a two-step kernel trace of each mode; what is live at each engine's memory peak
# (bench/memory_peak.py). Writes bench.json and bench.md into OUT_DIR.
# ST_BENCH_QUICK=1: without activation checkpointing only.
# Run by scripts/gpu-check.sh, after
# scripts/gpu-env.sh (Open MPI and the libraries from the prefix).
# usage: bench/gpu.sh BUILD_DIR OUT_DIR
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=$1 out=$2
mkdir -p "$out"
model=${SHARDTUNE_BENCH_MODEL:-$out/llama-3.2-1b}
seq=2048
results="$out/runs.jsonl"
: >"$results"

# shardtune's programs load the prefix's libraries (scripts/gpu-env.sh), Python its own.
with_libs() { LD_LIBRARY_PATH="${ST_LIBS:-}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$@"; }

if [ ! -f "$model/model.safetensors.index.json" ]; then
  with_libs "$build/bin/shardtune-make-model" "$model" --config "$root/tests/fixtures/hf_configs/llama-3.2-1b.json" --dtype bf16 ||
    { echo "bench: shardtune-make-model failed"; exit 1; }
fi
python3 "$root/bench/torch_baseline.py" matmul >>"$results" 2>"$out/matmul.err" || echo "bench: the matmul measurement failed"

train_bench() {  # train_bench MICRO_BATCH EXTRA_ARGS...
  local b=$1
  shift
  with_libs mpirun -np 1 --bind-to none --mca btl self,vader,tcp --mca btl_tcp_if_include lo --mca oob_tcp_if_include lo \
    "$build/bin/train_bench" "$model" --device cuda --seq $seq --micro-batch "$b" "$@"
}

shardtune() {  # shardtune MICRO_BATCH EXTRA_ARGS...: appends the JSON line; returns 3 if it does not fit
  train_bench "$@" >"$out/run.json" 2>"$out/run.err"
  local rc=$?
  [ $rc -eq 0 ] && tail -1 "$out/run.json" >>"$results"
  [ $rc -ne 0 ] && [ $rc -ne 3 ] && tail -3 "$out/run.err"
  return $rc
}

torch_run() {  # torch_run MICRO_BATCH EXTRA_ARGS...
  local b=$1
  shift
  python3 "$root/bench/torch_baseline.py" train "$model" --seq $seq --micro-batch "$b" "$@" >"$out/torch.json" 2>"$out/torch.err"
  local rc=$?
  [ $rc -eq 0 ] && tail -1 "$out/torch.json" >>"$results"
  [ $rc -ne 0 ] && tail -3 "$out/torch.err"
  return $rc
}

# flash_ran FILE: whether the torch run whose JSON line is FILE's last ran PyTorch's flash attention
# kernels (pytorch_flash::...; cuDNN's kernels have "flash" in their names too).
flash_ran() { tail -1 "$1" | python3 -c 'import json, sys; sys.exit(0 if any("pytorch_flash" in k for k in json.load(sys.stdin).get("attention_kernels", {})) else 1)'; }

quick=${ST_BENCH_QUICK:-0}
modes=("" --checkpointing)
sizes="16 8 4 2 1"
[ "$quick" = 1 ] && modes=("")
for ckpt in "${modes[@]}"; do
  best=0
  for b in $sizes; do  # each size that does not fit costs a load of the model
    shardtune "$b" $ckpt && { best=$b; break; }
    [ $? -ne 3 ] && break
  done
  echo "bench: shardtune ${ckpt:-without checkpointing}: largest micro-batch $best"
  [ "$best" -gt 0 ] || continue
  # PyTorch with flash attention (shardtune's kernel where it leaves cuDNN out), then PyTorch's own
  # choice, eager and compiled; each row lists the attention kernels it ran. At the same
  # micro-batch: where PyTorch's does not fit (it keeps more), both engines a size down.
  torch_run "$best" $ckpt --sdpa flash
  rc=$?
  while [ $rc -eq 3 ] && [ "$best" -gt 1 ]; do
    best=$((best / 2))
    echo "bench: PyTorch ${ckpt:-without checkpointing} does not fit micro-batch $((best * 2)); both engines at $best"
    shardtune "$best" $ckpt || true
    torch_run "$best" $ckpt --sdpa flash
    rc=$?
  done
  torch_run "$best" $ckpt || true
  torch_run "$best" $ckpt --compile && cp "$out/torch.json" "$out/torch-compile.json" || true
  if [ -z "$ckpt" ]; then
    # The fused AdamW's share: the same run with AdamW an operation at a time.
    shardtune "$best" --adamw-ops || true
    # shardtune's AdamW kernel against LibTorch's fused one (torch.optim.AdamW(fused=True)'s).
    shardtune "$best" --adamw-torch-fused || true
    # Where the time goes: a trace of two steps, kernels included (trace.json.gz).
    mkdir -p "$out/trace"
    train_bench "$best" --steps 1 --warmup 1 --trace "$out/trace" >/dev/null 2>"$out/trace.err" &&
      gzip -c "$out/trace/rank-00000.trace.json" >"$out/trace.json.gz" || echo "bench: the trace failed"
    # What is live at each engine's peak: two more steps with the caching allocator's history, its
    # blocks grouped by where they were allocated (C++ frames named through the dynamic symbol
    # table: train_bench exports its symbols). The summaries stay; the pickles are large.
    TORCH_SYMBOLIZE_MODE=dladdr train_bench "$best" --steps 1 --warmup 1 --memory-snapshot "$out/memory-shardtune.pickle" \
      >/dev/null 2>"$out/snapshot.err" || echo "bench: shardtune's allocator snapshot failed"
    python3 "$root/bench/torch_baseline.py" train "$model" --seq $seq --micro-batch "$best" --sdpa flash --steps 1 \
      --warmup 1 --memory-snapshot "$out/memory-pytorch.pickle" >/dev/null 2>>"$out/snapshot.err" ||
      echo "bench: PyTorch's allocator snapshot failed"
    for engine in shardtune pytorch; do
      [ -f "$out/memory-$engine.pickle" ] || continue
      python3 "$root/bench/memory_peak.py" "$out/memory-$engine.pickle" --top 25 --json >"$out/memory-$engine.json" ||
        rm -f "$out/memory-$engine.json"
      rm -f "$out/memory-$engine.pickle"
    done
  fi
  # shardtune with cuDNN's attention left out everywhere (flash).
  shardtune "$best" $ckpt --attention no-cudnn || true
  # Compiled PyTorch with flash too, where its own choice was another kernel.
  [ -f "$out/torch-compile.json" ] && ! flash_ran "$out/torch-compile.json" && { torch_run "$best" $ckpt --compile --sdpa flash || true; }
  rm -f "$out/torch-compile.json"
  if [ -z "$ckpt" ]; then
    # Each fusion's share (runtime/model/fused_ops.h): the same run with it as ATen's operations,
    # then with none; last, and shorter, so that a call's limit cuts these first.
    for fusion in rmsnorm residual_norm rope swiglu cross_entropy gqa gate_up qkv all; do
      shardtune "$best" --unfused $fusion --steps 6 --warmup 2 || true
    done
  fi
  if [ -n "$ckpt" ]; then
    # Half the blocks exempt from checkpointing ([fsdp] uncheckpointed_blocks): the time and memory
    # between the two modes.
    shardtune "$best" $ckpt --uncheckpointed-blocks 8 || true
    # Where the recomputation's time goes: a trace of two steps with activation checkpointing.
    mkdir -p "$out/trace-checkpointing"
    train_bench "$best" $ckpt --steps 1 --warmup 1 --trace "$out/trace-checkpointing" >/dev/null 2>>"$out/trace.err" &&
      gzip -c "$out/trace-checkpointing/rank-00000.trace.json" >"$out/trace-checkpointing.json.gz" ||
      echo "bench: the trace with activation checkpointing failed"
    # Packed rows (per-document attention) against one document per row: as training chooses the
    # kernel per shape, and flash alone.
    shardtune "$best" $ckpt --packed || true
    shardtune "$best" $ckpt --packed --attention no-cudnn || true
  fi
done

python3 "$root/bench/gpu_report.py" "$results" "$out"
