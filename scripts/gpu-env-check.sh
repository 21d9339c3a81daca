#!/usr/bin/env bash
# Tries the GPU check's build environment on this Debian 12 CPU machine, before a GPU machine is
# lent: in a private mount namespace, this machine's own copies of the packages that
# scripts/gpu-deps.sh downloads are hidden (every file of theirs covered by /dev/null), so the
# build finds nothing but the prefix that scripts/gpu-env.sh unpacks, as on a machine that has
# only PyTorch, CUDA, CMake and a compiler. LibTorch is Debian's (ST_TORCH_DIR) in place of the
# wheel's. Then scripts/gpu-check.sh --build-only builds the GPU check's programs and runs the
# multi-rank ones on the CPU through the prefix's Open MPI. Needs root (mount) and scripts/setup.sh.
# Shared libraries that the system's own tools load (zlib, OpenSSL, PCRE2, curl, ...) stay visible.
# usage: scripts/gpu-env-check.sh [--jobs N] OUT_DIR      (about 10 minutes on 2 cores)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
jobs=(--jobs "$(nproc)")
[ "${1:-}" = --jobs ] && { jobs=(--jobs "$2"); shift 2; }
[ $# -eq 1 ] || { echo "usage: scripts/gpu-env-check.sh [--jobs N] OUT_DIR" >&2; exit 2; }
out=$(mkdir -p "$1" && cd "$1" && pwd)
[ "$(id -u)" -eq 0 ] || { echo "gpu-env-check: needs root (a private mount namespace)" >&2; exit 1; }

if [ "${ST_ENV_CHECK_INNER:-}" != 1 ]; then
  compgen -G "$root/.deps/gpu/debs/*.deb" >/dev/null || bash "$root/scripts/gpu-deps.sh"
  exec env ST_ENV_CHECK_INNER=1 unshare --mount --propagation private bash "$root/scripts/gpu-env-check.sh" "${jobs[@]}" "$out"
fi

# The packages whose files are hidden: gpu-deps.sh's, and the other packages of this machine that
# would offer the same headers, libraries or programs; less those the system's tools need.
declare -A keep
for p in zlib1g libssl3 libpcre2-8-0 libcurl4 libnghttp2-14 librtmp1 libssh2-1 libpsl5 libldap-2.5-0 libsasl2-2 \
         libsasl2-modules-db libidn2-0 libbrotli1 libfmt9; do
  keep[$p]=1
done
mapfile -t listed < <(sed -n '/^packages=(/,/^)/p' "$root/scripts/gpu-deps.sh" | sed '1d;$d;s/#.*//' | tr ' ' '\n' | sed '/^$/d')
hidden=0
for p in "${listed[@]}" libgmock-dev mpi-default-dev mpi-default-bin libhdf5-mpi-dev libpmix-dev libhwloc-dev \
         libevent-dev libaec-dev libcurl4-openssl-dev libnuma-dev libibverbs-dev libnl-3-dev libnl-route-3-dev; do
  [ -n "${keep[$p]:-}" ] && continue
  dpkg -s "$p" >/dev/null 2>&1 || continue
  while IFS= read -r f; do
    # Plain files only: a mount over a link would cover the file it points to.
    if [ -f "$f" ] && [ ! -L "$f" ] && mount --bind /dev/null "$f"; then hidden=$((hidden + 1)); fi
  done < <(dpkg -L "$p")
done
echo "gpu-env-check: $hidden files of this machine hidden"
[ ! -s /usr/lib/x86_64-linux-gnu/openmpi/include/mpi.h ] && [ ! -s /usr/include/spdlog/spdlog.h ] || { echo "gpu-env-check: hiding failed" >&2; exit 1; }

export ST_TORCH_DIR=${ST_TORCH_DIR:-/usr/lib/x86_64-linux-gnu/cmake/Torch}
export ST_PREFIX=$out/prefix SHARDTUNE_GPU_BUILD_DIR=$out/build
exec bash "$root/scripts/gpu-check.sh" --build-only "${jobs[@]}" "$out/report"
