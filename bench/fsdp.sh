#!/usr/bin/env bash
# FSDP throughput and communication share at world sizes 1, 2 and 4 (see fsdp_bench.cpp).
# usage: bench/fsdp.sh [BUILD_DIR] [STEPS]
set -euo pipefail
build=${1:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/build}
steps=${2:-10}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
echo "cores: $(nproc) (ranks beyond that share cores)"
for np in 1 2 4; do
  mpirun -np "$np" --oversubscribe --bind-to none --mca btl_tcp_if_include lo --mca oob_tcp_if_include lo \
    "$build/bin/fsdp_bench" "$steps"
done
