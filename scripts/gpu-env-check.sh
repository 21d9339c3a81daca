#!/usr/bin/env bash
# Tries the GPU check's build environment on this Debian 12 CPU machine, before a GPU machine is
# lent: in a private mount namespace, over an overlay of /usr, this machine's own copies of the
# packages that scripts/gpu-deps.sh downloads are removed from view, so the build finds nothing
# but the prefix that scripts/gpu-env.sh unpacks, as on a machine that has only PyTorch, CUDA,
# CMake and a compiler. LibTorch is Debian's (ST_TORCH_DIR) in place of the wheel's. Then
# scripts/gpu-check.sh --build-only builds the GPU check's programs from nothing and runs the
# multi-rank ones on the CPU through the prefix's Open MPI. Needs root (mount) and scripts/setup.sh.
# Shared libraries that the system's own tools load (zlib, OpenSSL, PCRE2, curl, ...) stay visible.
# --objects-from BUILD: the programs are built from BUILD's objects (this machine's own build of the
# same sources), each header found again in the prefix by a preprocessor pass, then archived and
# linked against the prefix (scripts/build_from_objects.py): about 3 minutes in place of 11. An
# object compiled from a header of a package whose .deb differs in version from this machine's copy
# is compiled again.
# usage: scripts/gpu-env-check.sh [--jobs N] [--objects-from BUILD] OUT_DIR
#        (a full build: 11 minutes on an idle 2-core machine, 19 beside a CPU-heavy process)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
jobs=(--jobs "$(nproc)")
objects_from=()
while [ $# -gt 1 ]; do
  case "$1" in
    --jobs) jobs=(--jobs "$2"); shift 2 ;;
    --objects-from) objects_from=(--objects-from "$(cd "$2" && pwd)"); shift 2 ;;
    *) break ;;
  esac
done
[ $# -eq 1 ] || { echo "usage: scripts/gpu-env-check.sh [--jobs N] [--objects-from BUILD] OUT_DIR" >&2; exit 2; }
out=$(mkdir -p "$1" && cd "$1" && pwd)
# Exit 77 (CTest's skip): not root, so no private mount namespace to hide packages in.
[ "$(id -u)" -eq 0 ] || { echo "gpu-env-check: skipped: needs root (a private mount namespace)" >&2; exit 77; }

if [ "${ST_ENV_CHECK_INNER:-}" != 1 ]; then
  compgen -G "$root/.deps/gpu/debs/*.deb" >/dev/null || bash "$root/scripts/gpu-deps.sh"
  exec env ST_ENV_CHECK_INNER=1 unshare --mount --propagation private bash "$root/scripts/gpu-env-check.sh" "${jobs[@]}" \
    "${objects_from[@]}" "$out"
fi

# An object is reused only when none of the headers it was compiled from belongs to a package whose
# .deb is another version than this machine's copy: those packages' files are listed for
# build_from_objects.py, which compiles such objects instead.
if [ ${#objects_from[@]} -gt 0 ]; then
  export ST_OBJECTS_FROM=${objects_from[1]} ST_DIFFERING_FILES=$out/differing-files.txt
  : >"$ST_DIFFERING_FILES"
  for deb in "$root"/.deps/gpu/debs/*.deb; do
    p=$(dpkg-deb -f "$deb" Package)
    have=$(dpkg-query -W -f '${Version}' "$p" 2>/dev/null || true)
    [ -n "$have" ] && [ "$have" != "$(dpkg-deb -f "$deb" Version)" ] && dpkg -L "$p" >>"$ST_DIFFERING_FILES"
  done
fi

[ "$(readlink /proc/self/ns/mnt)" != "$(readlink /proc/1/ns/mnt)" ] ||
  { echo "gpu-env-check: not in a mount namespace of its own" >&2; exit 1; }
# /usr becomes an overlay whose upper layer lives in OUT, so files can be removed from this
# namespace's view (a whiteout each) without touching the machine's own. Nothing is removed
# unless /usr is that overlay.
rm -rf "$out/overlay"
mkdir -p "$out/overlay/upper" "$out/overlay/work"
mount -t overlay overlay -o "lowerdir=/usr,upperdir=$out/overlay/upper,workdir=$out/overlay/work" /usr ||
  { echo "gpu-env-check: cannot put an overlay on /usr" >&2; exit 1; }
[ "$(findmnt -n -o FSTYPE --mountpoint /usr)" = overlay ] || { echo "gpu-env-check: /usr is not the overlay" >&2; exit 1; }

# The packages removed: gpu-deps.sh's, and the other packages of this machine that would offer the
# same headers, libraries or programs, and ssh (GPU images rarely have it, and Open MPI looks for
# it); less the shared libraries the system's own tools load.
declare -A keep
for p in zlib1g libssl3 libpcre2-8-0 libcurl4 libnghttp2-14 librtmp1 libssh2-1 libpsl5 libldap-2.5-0 libsasl2-2 \
         libsasl2-modules-db libidn2-0 libbrotli1 libfmt9 libunistring2 libgssapi-krb5-2 libkrb5-3 libk5crypto3 \
         libkrb5support0 libkeyutils1; do
  keep[$p]=1
done
mapfile -t listed < <(sed -n '/^packages=(/,/^)/p' "$root/scripts/gpu-deps.sh" | sed '1d;$d;s/#.*//' | tr ' ' '\n' | sed '/^$/d')
installed=()
for p in "${listed[@]}" libgmock-dev mpi-default-dev mpi-default-bin libhdf5-mpi-dev libpmix-dev libhwloc-dev \
         libevent-dev libaec-dev libcurl4-openssl-dev libnuma-dev libibverbs-dev libnl-3-dev libnl-route-3-dev \
         openssh-client; do
  [ -n "${keep[$p]:-}" ] && continue
  dpkg -s "$p" >/dev/null 2>&1 && installed+=("$p")
done
# Files and links under /usr only (/lib is /usr/lib on Debian 12), never directories: one pass
# over the packages' lists (a process per file took half a minute).
{ [ ${#installed[@]} -eq 0 ] || dpkg -L "${installed[@]}"; } | python3 -c '
import os, sys
removed = 0
for f in sys.stdin.read().splitlines():
    if not (os.path.isfile(f) or os.path.islink(f)) or os.path.isdir(f):
        continue
    if not (os.path.realpath(os.path.dirname(f)) + "/").startswith("/usr/"):
        continue
    try:
        os.remove(f)
        removed += 1
    except FileNotFoundError:
        pass
print(f"gpu-env-check: {removed} files of this machine removed from view")
'

[ ! -e /usr/lib/x86_64-linux-gnu/openmpi/include/mpi.h ] && [ ! -e /usr/include/spdlog/spdlog.h ] &&
  [ ! -e /usr/include/zlib.h ] || { echo "gpu-env-check: removing failed" >&2; exit 1; }

export ST_TORCH_DIR=${ST_TORCH_DIR:-/usr/lib/x86_64-linux-gnu/cmake/Torch}
# From nothing, as on a fresh GPU machine: a cached configuration would hide a missing package.
rm -rf "$out/prefix" "$out/build" "$out/report"
export ST_PREFIX=$out/prefix SHARDTUNE_GPU_BUILD_DIR=$out/build
rc=0
# The build's 900 s are a device call's; a busy 2-core machine may need twice that. What this
# check asks is whether the build works here, not how fast.
ST_BUILD_LIMIT_S=${ST_BUILD_LIMIT_S:-2400} bash "$root/scripts/gpu-check.sh" --build-only "${jobs[@]}" "$out/report" || rc=$?
if [ $rc -ne 0 ]; then  # the end of each failed check's log
  awk -F'\t' '$2 == "FAIL" {print $1}' "$out/report/results.tsv" | while read -r name; do
    echo "---- $name: $out/report/logs/$name.log"
    tail -n 25 "$out/report/logs/$name.log"
  done
fi
exit $rc
