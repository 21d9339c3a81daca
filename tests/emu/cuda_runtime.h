// The CUDA runtime calls shardtune's kernels and their GPU test make, on the CPU (cuda_emu.h): one
// device, whose memory is host memory (cudaMalloc aligns to 256 bytes, as CUDA does).
#pragma once

#include <cstddef>

#include "cuda_emu.h"

enum cudaError_t { cudaSuccess = 0, cudaErrorMemoryAllocation = 2, cudaErrorInvalidValue = 1 };
using cudaError = cudaError_t;
enum cudaMemcpyKind { cudaMemcpyHostToHost, cudaMemcpyHostToDevice, cudaMemcpyDeviceToHost, cudaMemcpyDeviceToDevice };

cudaError_t cudaGetDeviceCount(int* count);
cudaError_t cudaMalloc(void** p, size_t bytes);
template <typename T>
cudaError_t cudaMalloc(T** p, size_t bytes) {
  return cudaMalloc(reinterpret_cast<void**>(p), bytes);
}
cudaError_t cudaFree(void* p);
cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind);
cudaError_t cudaDeviceSynchronize();
cudaError_t cudaGetLastError();
const char* cudaGetErrorString(cudaError_t e);
