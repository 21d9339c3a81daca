#!/usr/bin/env bash
# One call of the GPU check on a lent machine whose calls have a time limit: the machine's facts,
# scripts/gpu-check.sh --stages STAGES into out/gc (kept between calls on the same machine) for at
# most LIMIT_S seconds, then what comes back, in at most 6 files under OUT_DIR: report.md,
# report.json, console.log, the benchmark's trace (trace.json.gz) and a tarball of the logs,
# the benchmark's runs and the training jobs' metrics (logs.tgz).
# usage: scripts/gpu-call.sh STAGES LIMIT_S OUT_DIR   (e.g. bench,tests,references 560 "$OUT")
set -uo pipefail
[ $# -eq 3 ] || { echo "usage: scripts/gpu-call.sh STAGES LIMIT_S OUT_DIR" >&2; exit 2; }
stages=$1 limit=$2 out=$3
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root" || exit 1
mkdir -p "$out" out/gc
out=$(cd "$out" && pwd)
{
  date -u
  head -2 /etc/os-release
  echo "cores $(nproc); $(free -g | awk '/Mem:/ {print $2}') GiB; /dev/shm $(df -h /dev/shm | awk 'NR==2 {print $2}')"
  echo "ssh: $(command -v ssh || echo none); nvcc: $(command -v nvcc || ls /usr/local/cuda/bin/nvcc 2>/dev/null || echo none)"
} | tee "$out/console.log"
timeout -k 10 "$limit" bash scripts/gpu-check.sh --stages "$stages" out/gc 2>&1 | tee -a "$out/console.log"
rc=${PIPESTATUS[0]}
cp out/gc/report.md out/gc/report.json "$out/" 2>/dev/null
[ -f out/gc/bench/trace.json.gz ] && cp out/gc/bench/trace.json.gz "$out/"
(cd out/gc && tar czf "$out/logs.tgz" logs results.tsv machine.txt \
  $(ls bench/*.json bench/*.jsonl bench/*.md bench/*.err job-np*/metrics.jsonl job-np*/logs/rank-00000.log \
       lora-job/metrics.jsonl 2>/dev/null))
echo "gpu-call: gpu-check exit $rc"
exit "$rc"
