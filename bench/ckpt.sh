#!/usr/bin/env bash
# Checkpoint save/load bandwidth at world size 4 against the raw disk (see ckpt_bench.cpp), with
# the shared-file alternative through each of Open MPI's MPI-IO components (ROMIO, then OMPIO).
# usage: bench/ckpt.sh [BUILD_DIR] [WORK_DIR] [LAYERS] [ROUNDS]   (12 layers: ~2.6 GB per checkpoint)
set -euo pipefail
build=${1:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/build}
work=${2:-/var/tmp/shardtune-ckpt-bench}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
for io in romio321 ompio; do
  OMPI_MCA_io=$io mpirun -x OMPI_MCA_io -np 4 --oversubscribe --bind-to none --mca btl_tcp_if_include lo \
    --mca oob_tcp_if_include lo "$build/bin/ckpt_bench" "$work" "${3:-12}" "${4:-3}"
done
