#!/usr/bin/env bash
# The GPU check, one command on a machine with an NVIDIA GPU, PyTorch (with CUDA), the CUDA
# toolkit, CMake and a C++20 compiler: builds shardtune against the PyTorch wheel's own LibTorch
# (the other dependencies come as Debian .deb files from scripts/gpu-deps.sh, unpacked into a
# prefix), runs the GPU tests, a training job on the GPU and, unless --no-bench, bench/gpu.sh; and
# writes report.md and report.json (plus the logs) into REPORT_DIR. The device tool carries
# .deps/gpu (the .deb files and the tokenizers of the tokenizer comparison) with the tree.
# --build-only stops after the build and runs the multi-rank programs on the CPU instead
# (scripts/gpu-env-check.sh: the build environment tried on a CPU machine).
#
# The GPU tests run the multi-rank test programs with ST_TEST_DEVICE=cuda, so every tensor lives
# on the GPU: at world size 1 over NCCL, and at world size 2 on the same GPU through the
# host-staged backend (NCCL refuses two ranks on one GPU), so the multi-rank device path runs.
#
# usage: scripts/gpu-check.sh [--no-bench] [--build-only] [--jobs N] REPORT_DIR
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
usage="usage: scripts/gpu-check.sh [--no-bench] [--build-only] [--jobs N] REPORT_DIR"
bench=1
build_only=0
jobs=$(nproc)
report=""
while [ $# -gt 0 ]; do
  case "$1" in
    --no-bench) bench=0 ;;
    --build-only) build_only=1 ;;
    --jobs) jobs=$2; shift ;;
    -*) echo "$usage" >&2; exit 2 ;;
    *) report=$1 ;;
  esac
  shift
done
[ -n "$report" ] || { echo "$usage" >&2; exit 2; }
mkdir -p "$report/logs"
report=$(cd "$report" && pwd)
build=${SHARDTUNE_GPU_BUILD_DIR:-$root/build-gpu}
results="$report/results.tsv"  # name, status, seconds, detail
: >"$results"
start_all=$SECONDS

# check NAME COMMAND...: runs one check, its output in logs/NAME.log; PASS on exit 0.
check() {
  local name=$1
  shift
  local t0=$SECONDS
  echo "== $name"
  "$@" >"$report/logs/$name.log" 2>&1
  local rc=$?
  local status=PASS detail=""
  if [ $rc -eq 77 ]; then
    status=SKIP
  elif [ $rc -ne 0 ]; then
    status=FAIL
    detail=$(grep -m1 -E "Failure|FAIL|error|Error" "$report/logs/$name.log" | cut -c1-200 | tr '\t' ' ')
  fi
  printf '%s\t%s\t%s\t%s\n' "$name" "$status" "$((SECONDS - t0))" "$detail" >>"$results"
  echo "   $status ($((SECONDS - t0)) s) $detail"
  return $rc
}

# The machine, as it reports itself.
{
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 | head -1
  python3 -c 'import torch; print(f"torch {torch.__version__} cuda {torch.version.cuda} nccl {torch.cuda.nccl.version()}")' 2>&1
  nvcc --version 2>&1 | tail -1
  cmake --version | head -1
  c++ --version | head -1
} >"$report/machine.txt"
cat "$report/machine.txt"

# shellcheck source=scripts/gpu-env.sh
if ! source "$root/scripts/gpu-env.sh" >"$report/logs/env.log" 2>&1; then
  cat "$report/logs/env.log"
  printf 'environment\tFAIL\t0\t%s\n' "$(tail -1 "$report/logs/env.log")" >>"$results"
else
  printf 'environment\tPASS\t0\t\n' >>"$results"
  generator=()
  command -v ninja >/dev/null && generator=(-G Ninja)
  check configure st_with_libs cmake -S "$root" -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
    "${ST_CMAKE_ARGS[@]}"
  # CI compiles the test programs among these against LibTorch 2.x headers too (CMakeLists.txt).
  targets=(shardtune shardtune-rank shardtune-make-model shardtune-ckpt shardtune-tokenize nccl_comm_test mpi_collectives_test
           fsdp_equivalence_test fsdp_training_test shard_loader_test device_checkpoint_test hf_model_test train_bench
           lora_fsdp_test lora_bench)
  check build st_with_libs cmake --build "$build" -j"$jobs" --target "${targets[@]}"

  mpirun_args=(-np 1 --oversubscribe --bind-to none --mca btl self,vader,tcp --mca btl_tcp_if_include lo
               --mca oob_tcp_if_include lo)  # ranks on this machine inherit the environment
  bin=$build/bin
  if [ $build_only -eq 1 ]; then
    # The programs on this machine's CPU, through the prefix's Open MPI: the plumbing, not the GPU.
    for t in mpi_collectives_test shard_loader_test device_checkpoint_test; do
      args=("${mpirun_args[@]}")
      args[1]=2
      check "${t%_test}_cpu_np2" st_with_libs mpirun "${args[@]}" "$bin/$t"
    done
    rm -rf "$report/job-cpu"
    check job_cpu_np2 st_with_libs "$bin/shardtune" run "$root/configs/tiny-cpu.toml" -n 2 --set launch.device=cpu \
      --set "job.output_dir=$report/job-cpu" --set train.max_train_step=20
  else
    check nccl_comm st_with_libs mpirun "${mpirun_args[@]}" "$bin/nccl_comm_test"
    for t in mpi_collectives_test fsdp_equivalence_test fsdp_training_test shard_loader_test device_checkpoint_test; do
      for np in 1 2; do
        args=("${mpirun_args[@]}")
        args[1]=$np
        check "${t%_test}_np$np" st_with_libs env ST_TEST_DEVICE=cuda mpirun "${args[@]}" "$bin/$t"
      done
    done

    # A training job on the GPU, as a user runs it: one rank over NCCL, then two on the one GPU.
    for np in 1 2; do
      out=$report/job-np$np
      rm -rf "$out"
      check "job_np$np" st_with_libs "$bin/shardtune" run "$root/configs/tiny-cpu.toml" -n "$np" \
        --set launch.device=cuda --set "job.output_dir=$out" --set train.max_train_step=200 \
        --set train.mixed_precision=true --set checkpoint.every_steps=100
      python3 - "$out" "$np" <<'PY' >>"$report/logs/job_np$np.log" 2>&1
import json, sys
out, np = sys.argv[1], int(sys.argv[2])
log = open(f"{out}/logs/rank-00000.log").read()
assert "device: one GPU visible to this task: device 0" in log, "not on the GPU"
assert "done: 200 steps" in log, "did not finish"
losses = [json.loads(l)["loss"] for l in open(f"{out}/metrics.jsonl") if '"step":' in l]
assert losses[-1] < 0.5 * losses[0], f"loss {losses[0]} -> {losses[-1]}"
print(f"loss {losses[0]:.3f} -> {losses[-1]:.3f} over {len(losses)} steps on {np} rank(s)")
PY
      [ $? -eq 0 ] || sed -i "s/^job_np$np\tPASS/job_np$np\tFAIL/" "$results"
    done

    # Against transformers itself: the reference folders, then the model tests that need them.
    check hf_fixtures python3 "$root/tools/reference/make_llama_fixtures.py" "$root/tests/fixtures/hf"
    check hf_reference st_with_libs "$bin/hf_model_test" --gtest_filter='HfReference.*:HfRoundTrip.*'
    check export_transformers st_with_libs bash "$root/tests/cli/export_transformers_test.sh" "$bin/shardtune-ckpt" "$bin/shardtune-make-model"
    check torch_reference bash -c "python3 '$root/tools/reference/llama_torch_reference.py' '$report/torch_reference' &&
      SHARDTUNE_TORCH_REFERENCE='$report/torch_reference' LD_LIBRARY_PATH='$ST_LIBS' '$bin/hf_model_test' --gtest_filter='TorchReference.*'"

    # LoRA: under FSDP on the GPU against the plain-PyTorch LoRA reference; the tiny LoRA job on the
    # GPU; its adapters exported, and loaded by peft onto transformers' Llama with the same logits.
    for np in 1 2; do
      args=("${mpirun_args[@]}")
      args[1]=$np
      check "lora_fsdp_np$np" st_with_libs env ST_TEST_DEVICE=cuda "SHARDTUNE_TORCH_REFERENCE=$report/torch_reference" \
        mpirun "${args[@]}" "$bin/lora_fsdp_test"
    done
    rm -rf "$report/lora-job" "$report/lora-peft"
    check lora_job st_with_libs "$bin/shardtune" run "$root/configs/tiny-lora.toml" --set launch.device=cuda \
      --set "job.output_dir=$report/lora-job" --set train.max_train_step=100 --set train.mixed_precision=true
    check lora_export_peft st_with_libs "$bin/shardtune-ckpt" export-peft "$report/lora-job/checkpoints/latest" \
      "$report/lora-peft"
    check lora_peft python3 "$root/tests/cli/lora_check.py" peft "$root/configs/data/tiny-llama" "$report/lora-peft"

    if [ $bench -eq 1 ]; then
      check benchmark bash "$root/bench/gpu.sh" "$build" "$report/bench"
      # LoRA against full fine-tuning of a 0.63B model on one GPU: memory, step time, gradient bytes.
      check lora_bench st_with_libs bash "$root/bench/lora.sh" "$build" "$report/lora-bench-model" 1 cuda 2048 16
      # The memory planner against the CUDA allocator's peaks (bench/plan.sh's GPU configurations).
      check plan_gpu st_with_libs bash "$root/bench/plan.sh" "$build" "$report/plan-bench" . cuda
      # Against Hugging Face's Rust tokenizers, on this machine's CPU: identical ids, and tokens/s.
      check tokenizer_rust st_with_libs bash "$root/bench/tokenizer_rust.sh" "$build" "$root/.deps/gpu/tokenizers" \
        "$report/tokenizer"
    fi
  fi
fi

# The report.
python3 - "$report" "$((SECONDS - start_all))" "$build_only" <<'PY'
import datetime, json, os, sys
report, seconds, build_only = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1"
rows = [l.rstrip("\n").split("\t") for l in open(f"{report}/results.tsv") if l.strip()]
machine = open(f"{report}/machine.txt").read().strip().splitlines()
bench = None
if os.path.exists(f"{report}/bench/bench.json"):
    bench = json.load(open(f"{report}/bench/bench.json"))
doc = {"date": datetime.date.today().isoformat(), "machine": machine, "seconds": seconds,
       "checks": [{"name": r[0], "status": r[1], "seconds": int(r[2]), "detail": r[3] if len(r) > 3 else ""}
                  for r in rows],
       "benchmark": bench}
json.dump(doc, open(f"{report}/report.json", "w"), indent=1)
title = "build environment (--build-only: built, run on the CPU)" if build_only else "GPU check"
lines = [f"# shardtune {title}, {doc['date']}", "", "Machine:", ""] + [f"    {m}" for m in machine] + [
    "", "| check | result | seconds | detail |", "|---|---|---|---|"]
lines += [f"| {c['name']} | {c['status']} | {c['seconds']} | {c['detail']} |" for c in doc["checks"]]
if bench is not None and os.path.exists(f"{report}/bench/bench.md"):
    lines += ["", open(f"{report}/bench/bench.md").read()]
if os.path.exists(f"{report}/logs/plan_gpu.log"):
    table = [l.rstrip("\n") for l in open(f"{report}/logs/plan_gpu.log") if l.startswith("|")]
    lines += ["", "The planner against the CUDA allocator (bench/plan.sh ... cuda):", ""] + table
open(f"{report}/report.md", "w").write("\n".join(lines) + "\n")
failed = [c["name"] for c in doc["checks"] if c["status"] == "FAIL"]
print(f"gpu-check: {len(doc['checks']) - len(failed)} of {len(doc['checks'])} checks passed"
      + (f"; failed: {', '.join(failed)}" if failed else "") + f"; report in {report}/report.md")
sys.exit(1 if failed else 0)
PY
