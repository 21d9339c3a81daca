#!/usr/bin/env bash
# One call of the GPU check on a lent machine whose calls have a time limit: the machine's facts,
# scripts/gpu-check.sh --stages STAGES into out/gc (kept between calls on the same machine) for at
# most LIMIT_S seconds (then every process it started is stopped, and the report says which check
# and stage the limit cut short and which stages did not run), then what comes back, in at most 6
# files under OUT_DIR: report.md, report.json, console.log, the benchmark's traces (trace.json.gz,
# and trace-checkpointing.json.gz where it ran with activation checkpointing) and a tarball of the
# logs, the benchmark's runs and the training jobs' metrics (logs.tgz).
# ST_GPU_CALL_WORK: the check's folder instead of out/gc.
# usage: scripts/gpu-call.sh STAGES LIMIT_S OUT_DIR   (e.g. bench,tests,references 560 "$OUT")
set -uo pipefail
[ $# -eq 3 ] || { echo "usage: scripts/gpu-call.sh STAGES LIMIT_S OUT_DIR" >&2; exit 2; }
stages=$1 limit=$2 out=$3
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root" || exit 1
work=${ST_GPU_CALL_WORK:-$root/out/gc}
mkdir -p "$out" "$work"
out=$(cd "$out" && pwd)
{
  date -u
  head -2 /etc/os-release
  echo "cores $(nproc); $(free -g | awk '/Mem:/ {print $2}') GiB; /dev/shm $(df -h /dev/shm | awk 'NR==2 {print $2}')"
  echo "ssh: $(command -v ssh || echo none); nvcc: $(command -v nvcc || ls /usr/local/cuda/bin/nvcc 2>/dev/null || echo none)"
  nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv,noheader 2>&1 | head -2
  python3 -c 'import torch; print(f"torch {torch.__version__}, CUDA {torch.version.cuda}, cuDNN {torch.backends.cudnn.version()}, NCCL {torch.cuda.nccl.version()}")' 2>&1 | tail -1
  python3 bench/sdpa_choice.py 2>&1 | tail -2
} | tee "$out/console.log"
# The check in a limit that stops every process it started, the per-check limits' too
# (scripts/run-limited.sh), so that a second call on the same machine finds none of them.
# ST_GPU_CHECK: another check script with gpu-check.sh's arguments (tests/cli/gpu_call_test.sh).
bash scripts/run-limited.sh "$limit" bash "${ST_GPU_CHECK:-scripts/gpu-check.sh}" --stages "$stages" "$work" 2>&1 |
  tee -a "$out/console.log"
rc=${PIPESTATUS[0]}
if [ "$rc" -eq 124 ]; then
  # The check it was running and its stage say they were cut short; the stages after it, not run.
  (report=$work build_only=0 && source scripts/gpu-check-lib.sh && cut_short "$limit")
  echo "gpu-call: the limit of $limit s stopped the check; report.md says what it cut short" | tee -a "$out/console.log"
fi
cp "$work/report.md" "$work/report.json" "$out/" 2>/dev/null
for trace in trace trace-checkpointing; do
  [ -f "$work/bench/$trace.json.gz" ] && cp "$work/bench/$trace.json.gz" "$out/"
done
(cd "$work" && tar czf "$out/logs.tgz" logs results.tsv stages.tsv machine.txt \
  $(ls bench/*.json bench/*.jsonl bench/*.md bench/*.err job-np*/metrics.jsonl job-np*/logs/rank-00000.log \
       lora-job/metrics.jsonl 2>/dev/null))
echo "gpu-call: gpu-check exit $rc"
exit "$rc"
