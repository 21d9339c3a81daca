# Compiles shardtune's LibTorch code against LibTorch 2.x CUDA headers as well, when the build
# itself uses a CPU-only LibTorch (Debian's 1.13): the CUDA-only sources (NCCL communicator, CUDA
# device layer) and every other source that uses LibTorch, the test programs that
# scripts/gpu-check.sh builds included, with SHARDTUNE_TORCH_HAS_CUDA set, so that code a CPU
# machine cannot run is still compiled, and the LibTorch 2.x paths with it. A type error in any of
# them fails the build. Syntax only: nothing is linked.
#
# The headers come from scripts/fetch-torch-cuda-headers.sh (run by scripts/setup.sh).

option(SHARDTUNE_CHECK_CUDA_SOURCES "Compile the CUDA sources against LibTorch 2.x CUDA headers (CPU builds)" ON)
set(SHARDTUNE_TORCH_CUDA_HEADERS "${PROJECT_SOURCE_DIR}/.deps/torch-cuda-headers/root/usr/include"
    CACHE PATH "LibTorch 2.x headers with CUDA (from scripts/fetch-torch-cuda-headers.sh)")

# shardtune_cuda_syntax_check(TARGETS t... EXTRA_SOURCES f... EXCLUDE_SOURCES f...)
function(shardtune_cuda_syntax_check)
  if(SHARDTUNE_TORCH_HAS_CUDA OR NOT SHARDTUNE_CHECK_CUDA_SOURCES)
    return()
  endif()
  cmake_parse_arguments(ARG "" "" "TARGETS;EXTRA_SOURCES;EXCLUDE_SOURCES" ${ARGN})
  set(headers "${SHARDTUNE_TORCH_CUDA_HEADERS}")
  if(NOT EXISTS "${headers}/c10/cuda/CUDAStream.h")
    message(FATAL_ERROR "No LibTorch 2.x CUDA headers in ${headers}: run scripts/fetch-torch-cuda-headers.sh "
                        "${PROJECT_SOURCE_DIR}/.deps/torch-cuda-headers (scripts/setup.sh does), or configure with "
                        "-DSHARDTUNE_CHECK_CUDA_SOURCES=OFF to skip compiling the CUDA sources")
  endif()
  if(NOT SHARDTUNE_HAVE_NCCL)
    message(FATAL_ERROR "Compiling the CUDA sources needs the CUDA toolkit and NCCL headers (/usr/local/cuda)")
  endif()

  # Every source of the targets, by absolute path, with the first target it belongs to (for that
  # target's compile definitions), plus the CUDA-only ones; minus the CPU stand-ins.
  set(sources ${ARG_EXTRA_SOURCES})
  foreach(target IN LISTS ARG_TARGETS)
    get_target_property(dir ${target} SOURCE_DIR)
    get_target_property(list ${target} SOURCES)
    foreach(s IN LISTS list)
      if(s MATCHES "\\.cpp$")
        cmake_path(ABSOLUTE_PATH s BASE_DIRECTORY "${dir}" NORMALIZE OUTPUT_VARIABLE abs)
        if(NOT abs IN_LIST sources)
          list(APPEND sources "${abs}")
          string(MAKE_C_IDENTIFIER "${abs}" key)
          set(owner_${key} ${target})
        endif()
      endif()
    endforeach()
  endforeach()
  if(ARG_EXCLUDE_SOURCES)
    list(REMOVE_ITEM sources ${ARG_EXCLUDE_SOURCES})
  endif()

  # The 2.x headers first; then the other dependencies' headers, never Debian's LibTorch 1.13.
  set(flags -std=c++20 -fsyntax-only -Wall -Wextra -Wno-unused-parameter -Werror=return-type
            -DSHARDTUNE_HAVE_NCCL=1 -DSHARDTUNE_TORCH_HAS_CUDA=1 -I${PROJECT_SOURCE_DIR}
            -isystem ${headers} -isystem ${headers}/torch/csrc/api/include)
  foreach(d ${CUDAToolkit_INCLUDE_DIRS} ${NCCL_INCLUDE_DIR} ${MPI_CXX_INCLUDE_DIRS} ${HDF5_INCLUDE_DIRS}
            ${PCRE2_INCLUDE_DIRS} ${SENTENCEPIECE_INCLUDE_DIRS} ${LIBDEFLATE_INCLUDE_DIRS})
    if(NOT d STREQUAL "/usr/include")
      list(APPEND flags -isystem ${d})
    endif()
  endforeach()

  set(stamps "")
  foreach(src IN LISTS sources)
    file(RELATIVE_PATH rel "${PROJECT_SOURCE_DIR}" "${src}")
    string(MAKE_C_IDENTIFIER "${rel}" id)
    set(stamp "${CMAKE_BINARY_DIR}/cuda_syntax_check/${id}.stamp")
    string(MAKE_C_IDENTIFIER "${src}" key)
    set(defines "")
    if(DEFINED owner_${key})  # the target's own definitions, none of Debian's LibTorch
      get_target_property(defs ${owner_${key}} COMPILE_DEFINITIONS)
      if(defs)
        list(TRANSFORM defs PREPEND -D OUTPUT_VARIABLE defines)
      endif()
    endif()
    add_custom_command(
      OUTPUT "${stamp}"
      COMMAND ${CMAKE_CXX_COMPILER} ${flags} ${defines} -MD -MF "${stamp}.d" -MT "${stamp}" "${src}"
      COMMAND ${CMAKE_COMMAND} -E touch "${stamp}"
      DEPENDS "${src}"
      DEPFILE "${stamp}.d"
      COMMENT "Compiling ${rel} against LibTorch 2.x CUDA headers"
      VERBATIM)
    list(APPEND stamps "${stamp}")
  endforeach()
  file(MAKE_DIRECTORY "${CMAKE_BINARY_DIR}/cuda_syntax_check")
  add_custom_target(cuda_syntax_check ALL DEPENDS ${stamps})
  list(LENGTH stamps count)
  message(STATUS "shardtune: ${count} sources are also compiled against LibTorch 2.x CUDA headers (${headers})")
endfunction()
