#!/usr/bin/env bash
# Runs the whole test suite: sets up and builds first (scripts/setup.sh), then every CTest test
# (unit, multi-rank under mpirun, command line; GPU tests skip themselves without a GPU).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
"$root/scripts/setup.sh"
ctest --test-dir "${SHARDTUNE_BUILD_DIR:-$root/build}" --output-on-failure -j"$(nproc)" "$@"
