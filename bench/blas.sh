#!/usr/bin/env bash
# What the BLAS under Debian's LibTorch is worth to CPU training: fsdp_bench (a 4.9M-parameter
# Llama, fp32, FULL_SHARD) run with each libblas.so.3 this machine has (Debian's alternatives:
# the reference BLAS of libblas3, OpenBLAS, ...), one after another in the same run; prints each
# one's tokens/s of plain and FSDP training and its ratio to the reference BLAS. scripts/setup.sh
# installs OpenBLAS (libopenblas0-openmp), which LibTorch then uses; the reference BLAS (libblas3)
# comes with LibTorch's packages. docs/design.md has the figures.
# usage: bench/blas.sh [BUILD_DIR] [STEPS] [NP]
set -euo pipefail
build=${1:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/build}
steps=${2:-6}
np=${3:-2}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mapfile -t libs < <(update-alternatives --list libblas.so.3-x86_64-linux-gnu)
reference=/usr/lib/x86_64-linux-gnu/blas/libblas.so.3
[[ " ${libs[*]} " == *" $reference "* ]] || { echo "bench/blas.sh: no reference BLAS ($reference, package libblas3)" >&2; exit 1; }
echo "cores: $(nproc); world $np; $steps steps"
declare -A plain fsdp
for lib in "${libs[@]}"; do
  # The dynamic loader takes libblas.so.3 from LD_LIBRARY_PATH before the alternatives' link.
  out=$(LD_LIBRARY_PATH="$(dirname "$lib")" mpirun -np "$np" --oversubscribe --bind-to none \
          --mca btl_tcp_if_include lo --mca oob_tcp_if_include lo "$build/bin/fsdp_bench" "$steps")
  plain[$lib]=$(sed -n 's/.*plain single process: *\([0-9.]*\) tok\/s.*/\1/p' <<<"$out")
  fsdp[$lib]=$(sed -n 's/.*FSDP, [0-9]* ranks: *\([0-9.]*\) tok\/s.*/\1/p' <<<"$out")
done
printf '%-60s %12s %12s %10s %10s\n' "libblas.so.3" "plain tok/s" "FSDP tok/s" "plain x" "FSDP x"
for lib in "${libs[@]}"; do
  awk -v l="$lib" -v p="${plain[$lib]}" -v f="${fsdp[$lib]}" -v rp="${plain[$reference]}" -v rf="${fsdp[$reference]}" \
    'BEGIN { printf "%-60s %12.0f %12.0f %10.2f %10.2f\n", l, p, f, p / rp, f / rf }'
done
