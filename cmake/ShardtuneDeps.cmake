# Finds every dependency of shardtune. All come from Debian packages, except a CUDA LibTorch,
# which may come from a PyTorch wheel through Torch_DIR, and CUDA/NCCL under /usr/local/cuda.

find_package(MPI REQUIRED COMPONENTS C CXX)
find_package(fmt REQUIRED)
find_package(spdlog REQUIRED)
find_package(tomlplusplus REQUIRED)
find_package(nlohmann_json REQUIRED)
find_package(CLI11 REQUIRED)
find_package(GTest REQUIRED)
find_package(OpenSSL REQUIRED COMPONENTS Crypto)  # SHA-256 of base-model identities
find_package(PkgConfig REQUIRED)
pkg_check_modules(LIBDEFLATE REQUIRED IMPORTED_TARGET GLOBAL libdeflate)  # CRC-32 of checkpoint slices
# The training ranks' malloc: tcmalloc (gperftools' minimal build, libtcmalloc-minimal4), whose
# page heap reuses freed spans without the holes glibc's heap leaves (docs/planner.md). Linked
# whether or not a symbol asks for it, so that it takes malloc over.
find_library(SHARDTUNE_TCMALLOC NAMES tcmalloc_minimal libtcmalloc_minimal.so.4 REQUIRED)
add_library(shardtune_tcmalloc INTERFACE)
target_link_libraries(shardtune_tcmalloc INTERFACE "-Wl,--push-state,--no-as-needed" "${SHARDTUNE_TCMALLOC}"
                      "-Wl,--pop-state")

if(SHARDTUNE_HDF5_LIBRARY)
  # A parallel HDF5 outside the system's paths, named by its library and headers (the GPU machine's
  # build: scripts/gpu-env.sh unpacks Debian's into a prefix, where its compiler wrapper cannot run).
  set(HDF5_C_LIBRARIES ${SHARDTUNE_HDF5_LIBRARY})
  set(HDF5_INCLUDE_DIRS ${SHARDTUNE_HDF5_INCLUDE_DIR})
  file(STRINGS ${SHARDTUNE_HDF5_INCLUDE_DIR}/H5pubconf.h st_hdf5_parallel REGEX "^#define H5_HAVE_PARALLEL 1")
  set(HDF5_IS_PARALLEL FALSE)
  if(st_hdf5_parallel)
    set(HDF5_IS_PARALLEL TRUE)
  endif()
else()
  set(HDF5_PREFER_PARALLEL TRUE)
  find_package(HDF5 REQUIRED COMPONENTS C)
endif()
if(NOT HDF5_IS_PARALLEL)
  message(FATAL_ERROR "shardtune needs a parallel (MPI) HDF5: install libhdf5-openmpi-dev")
endif()

# LibTorch: Debian's 1.13.1 (CPU) or a 2.x from a PyTorch wheel (Torch_DIR=<wheel>/share/cmake/Torch).
find_package(Torch REQUIRED)
if(TARGET c10_cuda OR TORCH_CUDA_LIBRARIES)
  set(SHARDTUNE_TORCH_HAS_CUDA TRUE)
else()
  set(SHARDTUNE_TORCH_HAS_CUDA FALSE)
endif()
# Debian's libtorch_cpu.so names two dozen libraries it takes no symbol from (OpenCV, FFmpeg,
# ZeroMQ, ...), through which a process that loads it maps about 300 libraries and runs their
# initialisers: most of the start of a rank or a shardtune-ckpt call. The programs load a copy
# without those entries (scripts/trim_torch_needed.py, which checks that every symbol still
# resolves), found first through their run path; where there is nothing to remove (a wheel's
# LibTorch) or no patchelf, LibTorch's own. The torch_loads test checks what the programs load.
option(SHARDTUNE_TRIM_TORCH "Load a copy of libtorch_cpu.so without the libraries it names but does not use" ON)
set(SHARDTUNE_TORCH_TRIMMED "")
if(SHARDTUNE_TRIM_TORCH AND TARGET torch_cpu)
  get_target_property(st_torch_cpu torch_cpu IMPORTED_LOCATION)
  get_target_property(st_torch_configs torch_cpu IMPORTED_CONFIGURATIONS)
  if(NOT st_torch_cpu AND st_torch_configs)
    list(GET st_torch_configs 0 st_torch_config)
    get_target_property(st_torch_cpu torch_cpu IMPORTED_LOCATION_${st_torch_config})
  endif()
  if(st_torch_cpu)
    find_package(Python3 REQUIRED COMPONENTS Interpreter)
    execute_process(COMMAND ${Python3_EXECUTABLE} ${PROJECT_SOURCE_DIR}/scripts/trim_torch_needed.py ${st_torch_cpu}
                            ${CMAKE_BINARY_DIR}/torch-trimmed
                    OUTPUT_VARIABLE SHARDTUNE_TORCH_TRIMMED OUTPUT_STRIP_TRAILING_WHITESPACE)
    set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${st_torch_cpu})
  endif()
  if(SHARDTUNE_TORCH_TRIMMED)
    list(APPEND CMAKE_BUILD_RPATH ${CMAKE_BINARY_DIR}/torch-trimmed)
  endif()
endif()
# TorchConfig puts its flags in TORCH_CXX_FLAGS (e.g. the C++11 ABI switch); apply them as a list.
separate_arguments(SHARDTUNE_TORCH_CXX_FLAGS UNIX_COMMAND "${TORCH_CXX_FLAGS}")
add_library(shardtune_torch INTERFACE)
# fmt first: a wheel's LibTorch ships fmt headers of another major version in torch/include, and
# the fmt that spdlog was built with must be the one every source includes. The C++ library before
# LibTorch too: a wheel's libtorch.so exports std::filesystem functions of its own (linked in from
# its toolchain's libstdc++_nonshared.a), and a program that needs libtorch.so first has its calls
# bound to them; std::filesystem::remove_all so bound jumped to address 0 on an H100 machine
# (PyTorch 2.11 wheel, Ubuntu 24.04, 2026-11-27). tests/cli/torch_loads_test.sh checks the order.
target_link_libraries(shardtune_torch INTERFACE fmt::fmt stdc++ ${TORCH_LIBRARIES})
# That was not enough with a wheel (H200, PyTorch 2.11 and its NCCL 2.28.9, Ubuntu 24.04,
# 2026-11-28): the programs needed no libstdc++ at all. The linker there drops a library that no
# symbol needs at its place on the line (--as-needed), so some library before it on the line
# (Debian's PCRE2, HDF5, libdeflate, zlib, Open MPI, or the wheel's NCCL: which one was not
# established) had already defined every C++ symbol the program uses. So every program and
# library needs libstdc++ first, before anything else.
add_link_options("SHELL:-Wl,--push-state,--no-as-needed -lstdc++ -Wl,--pop-state")
target_compile_options(shardtune_torch INTERFACE ${SHARDTUNE_TORCH_CXX_FLAGS})

# CUDA and NCCL: compiled whenever found, even with a CPU LibTorch. The NCCL layer works on raw
# device pointers and cudaStream_t; the bridge to LibTorch CUDA tensors needs a CUDA LibTorch.
set(SHARDTUNE_HAVE_NCCL FALSE)
if(SHARDTUNE_WITH_NCCL)
  if(NOT CUDAToolkit_ROOT AND EXISTS /usr/local/cuda)
    set(CUDAToolkit_ROOT /usr/local/cuda)
  endif()
  find_package(CUDAToolkit QUIET)
  if(CUDAToolkit_FOUND)
    find_path(NCCL_INCLUDE_DIR nccl.h
      HINTS ${NCCL_ROOT} $ENV{NCCL_ROOT} ${CUDAToolkit_INCLUDE_DIRS}
      PATH_SUFFIXES include)
    find_library(NCCL_LIBRARY nccl
      HINTS ${NCCL_ROOT} $ENV{NCCL_ROOT} ${CUDAToolkit_LIBRARY_DIR}
      PATH_SUFFIXES lib lib64)
    if(NCCL_INCLUDE_DIR AND NCCL_LIBRARY)
      set(SHARDTUNE_HAVE_NCCL TRUE)
      add_library(shardtune_nccl INTERFACE)
      target_include_directories(shardtune_nccl SYSTEM INTERFACE ${NCCL_INCLUDE_DIR})
      target_link_libraries(shardtune_nccl INTERFACE ${NCCL_LIBRARY} CUDA::cudart)
    endif()
  endif()
endif()

# Tokenizers: PCRE2 (Unicode regex of tokenizer.json pre-tokenizers) and SentencePiece
# (tokenizer.model files). Debian: libpcre2-dev, libsentencepiece-dev.
pkg_check_modules(PCRE2 REQUIRED IMPORTED_TARGET GLOBAL libpcre2-8)
pkg_check_modules(SENTENCEPIECE REQUIRED IMPORTED_TARGET GLOBAL sentencepiece)
