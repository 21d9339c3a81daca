#!/usr/bin/env bash
# Fetches LibTorch 2.x headers with CUDA support (Debian trixie's libtorch-dev and
# libtorch-cuda-dev, contrib) into DEST/root/usr/include, so that this CPU-only machine compiles
# shardtune's CUDA sources and its LibTorch 2.x code paths too (cmake/TorchCudaSyntaxCheck.cmake).
# Only headers are used: trixie's libraries need a newer glibc than bookworm's and are never linked.
# apt runs with a state of its own under DEST; the system's sources and packages are not touched.
# usage: fetch-torch-cuda-headers.sh DEST
set -euo pipefail
dest=$(mkdir -p "$1" && cd "$1" && pwd)
stamp="$dest/root/.complete"
[ -f "$stamp" ] && exit 0
rm -rf "$dest/root" "$dest/debs"
mkdir -p "$dest/lists/partial" "$dest/etc" "$dest/debs"
echo 'deb http://deb.debian.org/debian trixie main contrib' >"$dest/etc/sources.list"
apt_state=(-o "Dir::State::Lists=$dest/lists" -o "Dir::Etc::SourceList=$dest/etc/sources.list"
           -o Dir::Etc::SourceParts=/dev/null -o Debug::NoLocking=1 -o APT::Sandbox::User=root)
apt-get "${apt_state[@]}" update -qq
(cd "$dest/debs" && apt-get "${apt_state[@]}" download libtorch-dev libtorch-cuda-dev)
for deb in "$dest"/debs/*.deb; do dpkg -x "$deb" "$dest/root"; done
[ -f "$dest/root/usr/include/c10/cuda/CUDAStream.h" ] || { echo "fetch-torch-cuda-headers: no CUDA headers in the packages" >&2; exit 1; }
rm -rf "$dest/lists" "$dest/debs"
touch "$stamp"
version=$(sed -n 's/^#define TORCH_VERSION_\(MAJOR\|MINOR\) \([0-9]*\)$/\2/p' "$dest/root/usr/include/torch/csrc/api/include/torch/version.h" | paste -sd.)
echo "fetch-torch-cuda-headers: LibTorch $version CUDA headers in $dest/root/usr/include"
