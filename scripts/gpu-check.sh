#!/usr/bin/env bash
# The GPU check, on a machine with an NVIDIA GPU, PyTorch (with CUDA), the CUDA toolkit, CMake and
# a C++20 compiler: builds shardtune against the PyTorch wheel's own LibTorch (the other
# dependencies come as Debian .deb files from scripts/gpu-deps.sh, unpacked into a prefix), runs
# the GPU tests, training jobs on the GPU, the references, LoRA and the benchmarks; and writes
# report.md and report.json (plus the logs) into REPORT_DIR. The device tool carries .deps/gpu
# (the .deb files and the tokenizers of the tokenizer comparison) with the tree.
#
# Every call configures and builds (incrementally), then runs the stages asked for, all by default:
#   tests       the multi-rank test programs with ST_TEST_DEVICE=cuda, so every tensor lives on
#               the GPU: at world size 1 over NCCL, and at 2 on the same GPU through the
#               host-staged backend (NCCL refuses two ranks on one GPU); the NCCL unit tests;
#               8-bit AdamW against its numpy reference, and that against bitsandbytes if installed
#   jobs        training jobs through `shardtune run` on the GPU, one rank and two
#   references  transformers' and the plain-PyTorch Llama references
#   lora        LoRA under FSDP against the PyTorch reference, a LoRA job, its PEFT export in peft
#   bench       bench/gpu.sh: shardtune against PyTorch FSDP2 eager and compiled
#   extras      the LoRA benchmark, the planner against the CUDA allocator, the tokenizer against
#               Hugging Face's Rust tokenizers
# Stages run in the order --stages lists them. A device call has a time limit, so a session may
# run the stages over several calls into the same REPORT_DIR: each check's row replaces the one of
# its earlier run, and the report is rewritten after every check, so a call stopped at its limit
# still leaves the report of what ran; stages.tsv and the report say which stage a limit cut short
# and which stages did not run. ST_CHECKS (a regular expression) runs only the checks whose names it
# matches, besides configure, build and link_order. ST_TEST_NPS ("1 2" by default) chooses the world
# sizes of the tests, jobs and lora stages; ST_BENCH_QUICK=1 makes the benchmark its shortest
# (bench/gpu.sh); ST_KEEP_BUILD=1 and ST_BUILD_TARGETS below.
# A target that fails to build fails the build check, and the checks that do not need it still run.
# --build-only runs the multi-rank programs on the CPU instead of any stage (scripts/gpu-env-check.sh:
# the build environment tried on a CPU machine). --no-bench: every stage but bench and extras.
#
# usage: scripts/gpu-check.sh [--stages LIST] [--no-bench] [--build-only] [--jobs N] REPORT_DIR
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# One GPU: the world-size-2 checks run two ranks on it, which NCCL refuses; shardtune stages their
# collectives through host memory only when asked (runtime/dist/gpu_sharing.h).
export SHARDTUNE_SHARE_GPUS=1
caller=$PWD
cd "$root" || exit 1  # the example jobs name their data relative to the repository
usage="usage: scripts/gpu-check.sh [--stages tests,jobs,references,lora,bench,extras] [--no-bench] [--build-only] [--jobs N] REPORT_DIR"
all_stages=tests,jobs,references,lora,bench,extras
stages=$all_stages
build_only=0
jobs=$(nproc)
report=""
while [ $# -gt 0 ]; do
  case "$1" in
    --stages) stages=$2; shift ;;
    --no-bench) stages=tests,jobs,references,lora ;;
    --build-only) build_only=1 ;;
    --jobs) jobs=$2; shift ;;
    -*) echo "$usage" >&2; exit 2 ;;
    *) report=$1 ;;
  esac
  shift
done
[ -n "$report" ] || { echo "$usage" >&2; exit 2; }
[[ "$report" == /* ]] || report=$caller/$report
for s in ${stages//,/ }; do
  [[ ",$all_stages," == *",$s,"* ]] || { echo "gpu-check: no stage '$s' (stages: $all_stages)" >&2; exit 2; }
done
mkdir -p "$report/logs"
report=$(cd "$report" && pwd)
build=${SHARDTUNE_GPU_BUILD_DIR:-$root/build-gpu}
# check, record, the stages' states and the report (the build has 900 s, ST_BUILD_LIMIT_S, as much
# as one device call gives it).
# shellcheck source=scripts/gpu-check-lib.sh
source "$root/scripts/gpu-check-lib.sh"

# The machine, as it reports itself.
{
  nvidia-smi --query-gpu=name,memory.total,driver_version,compute_mode --format=csv,noheader 2>&1 | head -1
  python3 -c 'import torch; print(f"torch {torch.__version__} cuda {torch.version.cuda} nccl {torch.cuda.nccl.version()}")' 2>&1
  nvcc --version 2>&1 | tail -1
  cmake --version | head -1
  c++ --version | head -1
} >"$report/machine.txt"
cat "$report/machine.txt"

# shellcheck source=scripts/gpu-env.sh
if ! source "$root/scripts/gpu-env.sh" >"$report/logs/env.log" 2>&1; then
  cat "$report/logs/env.log"
  record environment FAIL 0 "$(tail -1 "$report/logs/env.log")"
  python3 "$root/scripts/gpu_check_report.py" "$report" "$build_only"
  exit 1
fi
record environment PASS 0 ""
export -f st_with_libs  # checks run in a child shell (check's time limit)
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
# ST_OBJECTS_FROM (with --build-only; scripts/gpu-env-check.sh): a build of this machine whose
# objects scripts/build_from_objects.py reuses, so it is configured the same way.
build_type=Release
[ -n "${ST_OBJECTS_FROM:-}" ] && build_type=$(sed -n 's/^CMAKE_BUILD_TYPE:STRING=//p' "$ST_OBJECTS_FROM/CMakeCache.txt")
# SHARDTUNE_TRIM_TORCH off: the wheel's LibTorch is not Debian's, and the CPU trial of this build
# (gpu-env-check.sh) would copy Debian's 120 MB libtorch_cpu.so for nothing. SHARDTUNE_FUZZ off: the
# fuzz targets need clang's libFuzzer, which a GPU machine may lack, and run in the CPU suite.
# ST_KEEP_BUILD=1: a later call on the same machine runs the programs the earlier call built (the
# tree is copied again at every call, which may make every source look newer than its object).
if [ "${ST_KEEP_BUILD:-0}" = 1 ] && [ $build_only -eq 0 ] && [ -x "$build/bin/train_bench" ]; then
  echo "== configure, build: kept from the earlier call on this machine (ST_KEEP_BUILD=1)"
else
  check configure st_with_libs cmake -S "$root" -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE="$build_type" \
    -DSHARDTUNE_TRIM_TORCH=OFF -DSHARDTUNE_FUZZ=OFF "${ST_CMAKE_ARGS[@]}"
  # CI compiles the test programs among these against LibTorch 2.x headers too (CMakeLists.txt).
  targets=(shardtune shardtune-rank shardtune-make-model shardtune-ckpt shardtune-tokenize nccl_comm_test mpi_collectives_test
           fsdp_equivalence_test fsdp_training_test shard_loader_test device_checkpoint_test hf_model_test train_bench
           lora_fsdp_test lora_bench kernels_gpu_test adam8bit_test adafactor_test adafactor_fsdp_test dpo_fsdp_test
           offload_test attention_choice_test)
  build_cmd=(cmake --build "$build" -j"$jobs" --target)
  keep_going=()
  [ ${#generator[@]} -gt 0 ] && keep_going=(-- -k 0)  # every target that can be built, and every error
  if [ $build_only -eq 1 ]; then  # what the runs below need
    targets=(shardtune shardtune-rank shardtune-tokenize mpi_collectives_test shard_loader_test device_checkpoint_test)
    [ -n "${ST_OBJECTS_FROM:-}" ] && build_cmd=(python3 "$root/scripts/build_from_objects.py" "$build" "$ST_OBJECTS_FROM" "$jobs")
  fi
  # ST_BUILD_TARGETS: only these (a short call that reruns a few checks; the jobs need shardtune,
  # shardtune-rank and shardtune-tokenize, the benchmark train_bench and shardtune-make-model).
  [ -n "${ST_BUILD_TARGETS:-}" ] && read -r -a targets <<<"$ST_BUILD_TARGETS"
  build_args=("${targets[@]}")
  [ $build_only -eq 0 ] && build_args+=("${keep_going[@]}")
  if ! limit=${ST_BUILD_LIMIT_S:-900} check build st_with_libs "${build_cmd[@]}" "${build_args[@]}" && [ $build_only -eq 1 ]; then
    python3 "$root/scripts/gpu_check_report.py" "$report" "$build_only"
    exit 1
  fi
fi

# Every symbol of the programs resolves, and they bind the C++ library's functions before LibTorch's
# (a wheel's libtorch.so exports std::filesystem functions of its own: cmake/ShardtuneDeps.cmake).
check link_order st_with_libs bash "$root/tests/cli/torch_loads_test.sh" "" "" "$build/bin/shardtune-rank" \
  "$build/bin/shard_loader_test"
# How the C++ library is linked here: the program's link line, and which libstdc++ a link that
# asks for it by name takes (-t lists every file the linker opens).
{
  command -v ninja >/dev/null && ninja -C "$build" -t commands bin/shardtune-rank | tail -1
  echo 'int main() {}' | c++ -x c++ - -o "$report/logs/stdcxx-probe" -Wl,--push-state,--no-as-needed -lstdc++ \
    -Wl,--pop-state -Wl,-t 2>&1 | grep -i "stdc++"
  readelf -d "$report/logs/stdcxx-probe" | grep NEEDED
  rm -f "$report/logs/stdcxx-probe"
} >"$report/logs/link_command.log" 2>&1

mpirun_args=(-np 1 --oversubscribe --bind-to none --mca btl self,vader,tcp --mca btl_tcp_if_include lo
             --mca oob_tcp_if_include lo)  # ranks on this machine inherit the environment
bin=$build/bin
export root bin
# mpirun_np NP: the arguments above at NP ranks, in the array np_args.
mpirun_np() {
  np_args=("${mpirun_args[@]}")
  np_args[1]=$1
}

if [ $build_only -eq 1 ]; then
  # The programs on this machine's CPU, through the prefix's Open MPI: the plumbing, not the GPU.
  # Less the cases that measure the algorithm, not the libraries, which the CPU suite runs at 1 to 4
  # ranks: the loader's peak memory (19 s of building and loading 0.2B-parameter folders), and the
  # collectives' every-op-every-dtype all-reduce and reduce-scatter sums (10 of their 12 s).
  mpirun_np 2
  for t in mpi_collectives_test shard_loader_test device_checkpoint_test; do
    filter=()
    [ "$t" = shard_loader_test ] && filter=(--gtest_filter=-ShardLoader.PeakMemoryIsBoundedByShardAndUnitsNotByDepth)
    [ "$t" = mpi_collectives_test ] &&
      filter=("--gtest_filter=-*Collectives.AllReduceEveryOpEveryDtypeExact*:*Collectives.ReduceScatterSumAndAvg*")
    check "${t%_test}_cpu_np2" st_with_libs mpirun "${np_args[@]}" "$bin/$t" "${filter[@]}"
  done
  rm -rf "$report/job-cpu"
  check job_cpu_np2 st_with_libs "$bin/shardtune" run "$root/configs/tiny-cpu.toml" -n 2 --set launch.device=cpu \
    --set "job.output_dir=$report/job-cpu" --set train.max_train_step=20
  stages=""
fi

nps=${ST_TEST_NPS:-1 2}

stage_tests() {
  check nccl_comm st_with_libs mpirun "${mpirun_args[@]}" "$bin/nccl_comm_test"
  # Our own CUDA kernels against float64, then under compute-sanitizer (memory errors and races).
  check kernels st_with_libs "$bin/kernels_gpu_test"
  sanitizer=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
  if [ -x "$sanitizer" ]; then
    check kernels_sanitizer st_with_libs "$sanitizer" --error-exitcode 1 --tool memcheck "$bin/kernels_gpu_test"
  fi
  # Attention's kernel chosen per shape by timing: each choice against float64 attention.
  check attention st_with_libs "$bin/attention_choice_test"
  # 8-bit AdamW on the GPU (its ATen operations) bit for bit against the numpy reference of
  # bitsandbytes' update, and that reference against bitsandbytes' own kernel where it is installed.
  [ -f "$report/adam8bit_reference/cases.json" ] ||
    check adam8bit_reference_make python3 "$root/tests/reference/adam8bit_reference.py" "$report/adam8bit_reference"
  check adam8bit st_with_libs env ST_TEST_DEVICE=cuda "SHARDTUNE_ADAM8BIT_REFERENCE=$report/adam8bit_reference" \
    "$bin/adam8bit_test" --gtest_filter='Adam8bitReference.*'
  check adam8bit_bitsandbytes python3 "$root/tests/reference/adam8bit_bnb_check.py" "$report/adam8bit_reference"
  # Adafactor on the GPU against the float64 reference of transformers' update: one rank, and sharded.
  [ -f "$report/adafactor_reference/cases.json" ] ||
    check adafactor_reference_make python3 "$root/tests/reference/adafactor_reference.py" "$report/adafactor_reference"
  check adafactor st_with_libs env ST_TEST_DEVICE=cuda "SHARDTUNE_ADAFACTOR_REFERENCE=$report/adafactor_reference" \
    "$bin/adafactor_test" --gtest_filter='AdafactorReference.*'
  # DPO (the fused per-token losses on the GPU) against the float64 reference, at every world size;
  # CPU offload (copies up and down on the copy streams, QLoRA's records included) against no offload.
  [ -f "$report/dpo_reference/dpo-full/cases.json" ] ||
    check dpo_reference_make python3 "$root/tests/reference/dpo_reference.py" "$report/dpo_reference"
  for np in $nps; do
    for t in mpi_collectives_test fsdp_equivalence_test fsdp_training_test shard_loader_test device_checkpoint_test \
             adafactor_fsdp_test dpo_fsdp_test offload_test; do
      mpirun_np $np
      check "${t%_test}_np$np" st_with_libs env ST_TEST_DEVICE=cuda \
        "SHARDTUNE_ADAFACTOR_REFERENCE=$report/adafactor_reference" "SHARDTUNE_DPO_REFERENCE=$report/dpo_reference" \
        mpirun "${np_args[@]}" "$bin/$t"
    done
  done
}

# gpu_job NP OUT: the tiny job on the GPU, as a user runs it, at NP ranks, and the same job on the
# CPU: the GPU's log must say it ran there; its loss at each of the first 100 steps must be within
# 1% of the CPU's (bf16 mixed precision both, differing by rounding alone: 0.025% at most at 1 and
# 2 ranks on an H200, 2026-11-28), its mean over the last 20 steps within 3% (once the loss falls
# fast, rounding differences grow: 1.2% at 2 ranks, with 2.1% at one step, on that machine), and
# it must have fallen by a fifth.
gpu_job() {
  local np=$1 out=$2
  local device
  for device in cuda cpu; do
    rm -rf "$out-$device"
    st_with_libs "$bin/shardtune" run "$root/configs/tiny-cpu.toml" -n "$np" --set launch.device=$device \
      --set "job.output_dir=$out-$device" --set train.max_train_step=200 --set train.mixed_precision=true \
      --set checkpoint.every_steps=100 || return 1
  done
  python3 - "$out" "$np" <<'PY'
import json, re, sys
out, np = sys.argv[1], int(sys.argv[2])
log = open(f"{out}-cuda/logs/rank-00000.log").read()
# The rank's device line names a GPU: the one GPU it sees, or its local rank's of several.
assert re.search(r"device: (one GPU visible to this task: device 0|\d+ GPUs visible to \d+ local ranks: device = local rank \d+)$",
                 log, re.M), "not on the GPU"
assert "done: 200 steps" in log, "did not finish"
def losses(d):
    return [json.loads(l)["loss"] for l in open(f"{out}-{d}/metrics.jsonl") if '"step":' in l]
gpu, cpu = losses("cuda"), losses("cpu")
assert len(gpu) == len(cpu) == 200, (len(gpu), len(cpu))
rel = [abs(g - c) / c for g, c in zip(gpu, cpu)]
worst = max(range(100), key=lambda i: rel[i])
anywhere = max(range(200), key=lambda i: rel[i])
tail = abs(sum(gpu[-20:]) - sum(cpu[-20:])) / sum(cpu[-20:])
print(f"loss on the GPU {gpu[0]:.4f} -> {gpu[-1]:.4f}, on the CPU {cpu[0]:.4f} -> {cpu[-1]:.4f}; "
      f"largest difference in the first 100 steps {100 * rel[worst]:.3f}% at step {worst + 1}, anywhere "
      f"{100 * rel[anywhere]:.3f}% at step {anywhere + 1}; last 20 steps' mean {100 * tail:.3f}% apart; {np} rank(s)")
assert rel[worst] <= 0.01, f"step {worst + 1}: GPU loss {gpu[worst]} against the CPU's {cpu[worst]}"
assert tail <= 0.03, f"the last 20 steps' mean loss: GPU {sum(gpu[-20:]) / 20} against the CPU's {sum(cpu[-20:]) / 20}"
assert gpu[-1] < 0.8 * gpu[0], f"loss {gpu[0]} -> {gpu[-1]}"
PY
}

export -f gpu_job

stage_jobs() {
  # One rank over NCCL, then two on the one GPU.
  for np in $nps; do
    check "job_np$np" gpu_job $np "$report/job-np$np"
  done
}

# The plain-PyTorch references of the Llama (and of LoRA), made once into REPORT_DIR.
torch_reference=$report/torch_reference
make_torch_reference() {
  [ -f "$torch_reference/.complete" ] ||
    check torch_reference_make bash -c "python3 '$root/tests/reference/llama_torch_reference.py' '$torch_reference' &&
      touch '$torch_reference/.complete'"
}

stage_references() {
  # Against transformers itself: the reference folders, then the model tests that need them.
  check hf_fixtures python3 "$root/tests/reference/make_llama_fixtures.py" "$root/tests/fixtures/hf"
  check hf_reference st_with_libs "$bin/hf_model_test" --gtest_filter='HfReference.*:HfRoundTrip.*'
  check export_transformers st_with_libs bash "$root/tests/cli/export_transformers_test.sh" "$bin/shardtune-ckpt" \
    "$bin/shardtune-make-model"
  make_torch_reference
  check torch_reference st_with_libs env "SHARDTUNE_TORCH_REFERENCE=$torch_reference" "$bin/hf_model_test" \
    --gtest_filter='TorchReference.*'
}

stage_lora() {
  # LoRA: under FSDP on the GPU against the plain-PyTorch LoRA reference; the tiny LoRA job on the
  # GPU; its adapters exported, and loaded by peft onto transformers' Llama with the same logits.
  make_torch_reference
  for np in $nps; do
    mpirun_np $np
    check "lora_fsdp_np$np" st_with_libs env ST_TEST_DEVICE=cuda "SHARDTUNE_TORCH_REFERENCE=$torch_reference" \
      mpirun "${np_args[@]}" "$bin/lora_fsdp_test"
  done
  rm -rf "$report/lora-job" "$report/lora-peft"
  check lora_job st_with_libs "$bin/shardtune" run "$root/configs/tiny-lora.toml" --set launch.device=cuda \
    --set "job.output_dir=$report/lora-job" --set train.max_train_step=100 --set train.mixed_precision=true
  check lora_export_peft st_with_libs "$bin/shardtune-ckpt" export-peft "$report/lora-job/checkpoints/latest" \
    "$report/lora-peft"
  check lora_peft python3 "$root/tests/cli/lora_check.py" peft "$root/configs/data/tiny-llama" "$report/lora-peft"
}

stage_bench() {
  limit=${ST_BENCH_LIMIT_S:-560} check benchmark bash "$root/bench/gpu.sh" "$build" "$report/bench"
}

stage_extras() {
  # LoRA against full fine-tuning of a 0.63B model on one GPU: memory, step time, gradient bytes.
  limit=400 check lora_bench st_with_libs bash "$root/bench/lora.sh" "$build" "$report/lora-bench-model" 1 cuda 2048 16
  # cpu_offload on the GPU: device memory saved and step time against the same run without it.
  limit=240 check offload_gpu st_with_libs env DEVICE=cuda RANKS=1 ROUNDS=2 \
    MODEL_DIR="${SHARDTUNE_BENCH_MODEL:-$report/bench/llama-3.2-1b}" bash "$root/bench/offload.sh" "$build" "$report/offload" 5
  # The memory planner against the CUDA allocator's peaks (bench/plan.sh's GPU configurations).
  limit=400 check plan_gpu st_with_libs bash "$root/bench/plan.sh" "$build" "$report/plan-bench" . cuda
  # Against Hugging Face's Rust tokenizers, on this machine's CPU: identical ids, and tokens/s.
  check tokenizer_rust st_with_libs bash "$root/bench/tokenizer_rust.sh" "$build" "$root/.deps/gpu/tokenizers" \
    "$report/tokenizer"
}

stages_planned "$stages"
for s in ${stages//,/ }; do
  stage_begin "$s"
  "stage_$s"
  stage_end "$s"
done

python3 "$root/scripts/gpu_check_report.py" "$report" "$build_only"
