#!/usr/bin/env bash
# Checkpoint save/load bandwidth at world size 4 against the raw disk (see ckpt_bench.cpp), with
# the shared-file alternative through each of Open MPI's MPI-IO components (ROMIO, then OMPIO);
# then shardtune-ckpt's commands on a checkpoint of the same model, with bandwidth and peak memory.
# usage: bench/ckpt.sh [BUILD_DIR] [WORK_DIR] [LAYERS] [ROUNDS]   (12 layers: ~3.4 GB per checkpoint)
set -euo pipefail
build=${1:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/build}
work=${2:-/var/tmp/shardtune-ckpt-bench}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
for io in romio321 ompio; do
  OMPI_MCA_io=$io mpirun -x OMPI_MCA_io -np 4 --oversubscribe --bind-to none --mca btl_tcp_if_include lo \
    --mca oob_tcp_if_include lo "$build/bin/ckpt_bench" "$work" "${3:-12}" "${4:-3}"
done

# shardtune-ckpt on a checkpoint of the same model: each command's bandwidth and peak memory.
tools=$work/tools
rm -rf "$tools" && mkdir -p "$tools"
"$build/bin/shardtune-make-model" "$tools/hf" --layers "${3:-12}" --hidden 2048 --intermediate 8192 --vocab 32000 \
  --dtype bf16 >/dev/null
echo "shardtune-ckpt (one process; a Hugging Face folder of the model above in bf16):"
for cmd in "import-hf $tools/hf $tools/full" "reshard $tools/full $tools/sharded -w 4" "verify $tools/sharded" \
  "consolidate $tools/sharded $tools/full2" "export-hf $tools/full2 $tools/hf2 --dtype bf16" \
  "diff $tools/full $tools/full2"; do
  # shellcheck disable=SC2086
  line=$("$build/bin/shardtune-ckpt" $cmd 2>&1 | tr '\r' '\n' |
    grep -oE "(imported|resharded|consolidated|exported|compared|[0-9]+ slices).*peak memory [0-9]+ MiB" | tail -1) || true
  printf '  %-12s %s\n' "${cmd%% *}" "${line:-FAILED}"
done
rm -rf "$tools"
