# Sourced by scripts/gpu-check.sh on a GPU machine: unpacks the .deb files of scripts/gpu-deps.sh
# into a prefix (dpkg -x, nothing installed), and sets what the build and the ranks need to use
# it: Open MPI relocated with OPAL_PREFIX, pkg-config through a sysroot, the NCCL and LibTorch of
# the machine's PyTorch wheel. Defines:
#   ST_PREFIX ST_LIBS (library path for shardtune's programs and the prefix's own, exported)
#   ST_CMAKE_ARGS (array) st_with_libs CMD... (runs CMD with ST_LIBS on LD_LIBRARY_PATH)
# The prefix's libraries load their own dependencies through LD_LIBRARY_PATH (Debian builds them
# with RUNPATH), so every shardtune program runs under st_with_libs; Python programs run without,
# against the machine's own libraries.
st_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
ST_DEBS=${ST_DEBS:-$st_root/.deps/gpu/debs}
ST_PREFIX=${ST_PREFIX:-$st_root/.deps/gpu/prefix}
ST_PYTHON=${ST_PYTHON:-python3}

st_env_fail() { echo "gpu-env: $*" >&2; return 1; }

# The prefix is unpacked again whenever the set of .deb files changed (its stamp lists them).
compgen -G "$ST_DEBS/*.deb" >/dev/null || st_env_fail "no .deb files in $ST_DEBS: run scripts/gpu-deps.sh on a Debian 12 machine and bring $ST_DEBS along" || return 1
st_debs=$(cd "$ST_DEBS" && ls ./*.deb)
if [ ! -f "$ST_PREFIX/.complete" ] || [ "$(cat "$ST_PREFIX/.complete")" != "$st_debs" ]; then
  rm -rf "$ST_PREFIX"
  mkdir -p "$ST_PREFIX"
  for deb in "$ST_DEBS"/*.deb; do dpkg -x "$deb" "$ST_PREFIX" || st_env_fail "dpkg -x $deb failed" || return 1; done
  # Links to absolute paths (zlib1g-dev's libz.so) point into the prefix instead, relatively, not at
  # this machine's files.
  while IFS= read -r link; do
    ln -sfnr "$ST_PREFIX$(readlink "$link")" "$link"
  done < <(find "$ST_PREFIX" -type l -lname '/*')
  # What update-alternatives would have made: the plain names of the tools.
  mkdir -p "$ST_PREFIX/bin"
  for pair in mpirun:orterun mpiexec:orterun mpicc:mpicc.openmpi mpicxx:mpicxx.openmpi pkg-config:pkgconf; do
    ln -sf "../usr/bin/${pair#*:}" "$ST_PREFIX/bin/${pair%%:*}"
  done
  echo "$st_debs" >"$ST_PREFIX/.complete"
fi

multiarch=x86_64-linux-gnu
export ST_LIBS="$ST_PREFIX/usr/lib/$multiarch:$ST_PREFIX/lib/$multiarch:$ST_PREFIX/usr/lib/$multiarch/openmpi/lib:$ST_PREFIX/usr/lib/$multiarch/hdf5/openmpi"
export OPAL_PREFIX="$ST_PREFIX/usr"
export PATH="$ST_PREFIX/bin:$ST_PREFIX/usr/bin:$PATH"
export PKG_CONFIG_LIBDIR="$ST_PREFIX/usr/lib/$multiarch/pkgconfig:$ST_PREFIX/usr/share/pkgconfig"
export PKG_CONFIG_SYSROOT_DIR="$ST_PREFIX"
# Debian's Open MPI defaults (openmpi-mca-params.conf: no UCX, no OFI) come from the prefix's /etc,
# which OPAL_PREFIX alone does not move.
export OPAL_SYSCONFDIR="$ST_PREFIX/etc/openmpi"
# PMIx looks for its plugins where Debian installs them, which on an Ubuntu 24.04 image holds
# Ubuntu's own PMIx 5 plugins ("dlopen error: ... pmix_mca_pcompress_zlib.so: undefined symbol:
# pmix_output_info", an H100 machine, 2026-11-27): the prefix's instead.
export PMIX_MCA_mca_base_component_path="$ST_PREFIX/usr/lib/$multiarch/pmix2/lib/pmix"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# Open MPI 4.1 refuses to start, even one local rank, when neither ssh nor rsh is installed (its rsh
# launcher checks for them first); every rank here is local, so it is not needed.
command -v ssh >/dev/null || command -v rsh >/dev/null || export OMPI_MCA_plm=^rsh
# Nothing outside the machine can be reached: transformers and the hub must not try.
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
# PyTorch's CMake files look for nvcc on PATH.
command -v nvcc >/dev/null || { [ -x /usr/local/cuda/bin/nvcc ] && export PATH="$PATH:/usr/local/cuda/bin"; }

st_with_libs() { LD_LIBRARY_PATH="$ST_LIBS${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$@"; }

# Every shared library the unpacked programs load must resolve here, in a version this machine's C
# library can load; name the ones that do not (ldd: "libx.so.1 => not found", or "version
# `GLIBC_2.36' not found (required by ...)").
st_missing=$(for f in "$ST_PREFIX"/usr/bin/orterun "$ST_PREFIX"/usr/lib/$multiarch/libmpi.so.40 \
                      "$ST_PREFIX"/usr/lib/$multiarch/libhdf5_openmpi.so.* "$ST_PREFIX"/usr/lib/$multiarch/libsentencepiece.so.* \
                      "$ST_PREFIX"/usr/lib/$multiarch/libspdlog.so.*; do
               [ -e "$f" ] && st_with_libs ldd "$f" 2>&1 | grep 'not found' | sed -E 's/^[[:space:]]+//; s/ \(0x[0-9a-f]+\)//'
             done | sort -u)
[ -z "$st_missing" ] || st_env_fail "libraries missing on this machine (add their Debian packages to scripts/gpu-deps.sh): $st_missing" || return 1

# LibTorch and NCCL of the machine's PyTorch wheel.
# ST_TORCH_DIR instead names a LibTorch's cmake folder (scripts/gpu-env-check.sh: Debian's, on CPU).
if [ -n "${ST_TORCH_DIR:-}" ]; then
  torch_dir=$ST_TORCH_DIR
  nccl_dir=""
else
  torch_cmake=$("$ST_PYTHON" -c 'import torch; print(torch.utils.cmake_prefix_path)' 2>/dev/null) ||
    st_env_fail "$ST_PYTHON cannot import torch" || return 1
  "$ST_PYTHON" -c 'import torch, sys; sys.exit(0 if torch.version.cuda else 1)' ||
    st_env_fail "this PyTorch has no CUDA" || return 1
  torch_dir=$torch_cmake/Torch
  nccl_dir=$("$ST_PYTHON" -c 'import nvidia.nccl as n; print(list(n.__path__)[0])' 2>/dev/null || true)
fi
if [ -n "$nccl_dir" ] && [ -f "$nccl_dir/include/nccl.h" ]; then
  mkdir -p "$ST_PREFIX/nccl/lib"
  ln -sfn "$nccl_dir/include" "$ST_PREFIX/nccl/include"
  nccl_so=$(ls "$nccl_dir"/lib/libnccl.so* | head -1)
  # The link name for the build, and the soname the programs then need, on their library path.
  ln -sf "$nccl_so" "$ST_PREFIX/nccl/lib/libnccl.so"
  ln -sf "$nccl_so" "$ST_PREFIX/nccl/lib/libnccl.so.2"
  ST_NCCL_ROOT="$ST_PREFIX/nccl"
  export ST_LIBS="$ST_LIBS:$ST_PREFIX/nccl/lib"
elif [ -f /usr/local/cuda/include/nccl.h ] || [ -f /usr/include/nccl.h ]; then
  ST_NCCL_ROOT=""
else
  st_env_fail "no NCCL: neither the nvidia-nccl wheel nor nccl.h under /usr/local/cuda or /usr/include" || return 1
fi

ST_CMAKE_ARGS=(
  -DTorch_DIR="$torch_dir"
  -DCMAKE_PREFIX_PATH="$ST_PREFIX/usr"
  -DMPI_C_COMPILER="$ST_PREFIX/bin/mpicc" -DMPI_CXX_COMPILER="$ST_PREFIX/bin/mpicxx"
  -DMPIEXEC_EXECUTABLE="$ST_PREFIX/bin/mpirun"
  -DSHARDTUNE_HDF5_INCLUDE_DIR="$ST_PREFIX/usr/include/hdf5/openmpi"
  -DSHARDTUNE_HDF5_LIBRARY="$ST_PREFIX/usr/lib/$multiarch/hdf5/openmpi/libhdf5.so"
  -DCMAKE_BUILD_RPATH="$ST_LIBS"
  # Debian's multiarch headers (OpenSSL's configuration.h), which the compiler looks for only under /usr.
  -DCMAKE_C_STANDARD_INCLUDE_DIRECTORIES="$ST_PREFIX/usr/include/$multiarch"
  -DCMAKE_CXX_STANDARD_INCLUDE_DIRECTORIES="$ST_PREFIX/usr/include/$multiarch"
)
[ -n "$ST_NCCL_ROOT" ] && ST_CMAKE_ARGS+=(-DNCCL_ROOT="$ST_NCCL_ROOT")
true
