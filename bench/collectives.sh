#!/usr/bin/env bash
# Communicator overhead against raw MPI at world sizes 2 and 4 (see collectives_bench.cpp).
# usage: bench/collectives.sh [BUILD_DIR]
set -euo pipefail
build=${1:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/build}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
for np in 2 4; do
  mpirun -np "$np" --oversubscribe --bind-to none --mca btl_tcp_if_include lo --mca oob_tcp_if_include lo \
    "$build/bin/collectives_bench"
done
