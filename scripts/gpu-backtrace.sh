#!/usr/bin/env bash
# The stack of a shardtune program that crashes on a GPU machine, under cuda-gdb (the GPU images
# have no gdb; cuda-gdb debugs host code too), run with the prefix's libraries (scripts/gpu-env.sh).
# Prints the program's output, then the backtrace of the thread that stopped and the loaded libraries.
# usage: scripts/gpu-backtrace.sh PROGRAM [ARGS...]
set -uo pipefail
[ $# -ge 1 ] || { echo "usage: scripts/gpu-backtrace.sh PROGRAM [ARGS...]" >&2; exit 2; }
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=scripts/gpu-env.sh
source "$root/scripts/gpu-env.sh" >/dev/null || exit 1
gdb=$(command -v cuda-gdb || echo /usr/local/cuda/bin/cuda-gdb)
"$gdb" -q -batch -ex 'set pagination off' -ex 'set confirm off' \
  -ex "set environment LD_LIBRARY_PATH=$ST_LIBS" -ex run -ex 'bt 40' -ex 'info sharedlibrary' --args "$@"
