// Cross-entropy's CUDA kernel: one block a row; each thread keeps a running (max, sum) over its
// share of the row, the block combines them, and a second pass writes the gradient over the
// logits. The label's logit is read before any thread writes.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>

#include "runtime/kernels/cross_entropy_cuda.h"
#include "runtime/kernels/cross_entropy_math.h"
#include "runtime/kernels/device_util.cuh"

namespace shardtune::kernels {
namespace {

constexpr int kThreads = kCeLanes;

// The block's combined (max, sum): within each warp by shuffles (lane 0 combines as
// cross_entropy_math.h's halving), then the warps' pairs in warp order, by every thread alike.
__device__ MaxSum block_combine(MaxSum v) {
  __shared__ MaxSum warp_pairs[kThreads / 32];
  for (int offset = 16; offset > 0; offset >>= 1) {
    const MaxSum other{__shfl_xor_sync(0xffffffffu, v.m, offset), __shfl_xor_sync(0xffffffffu, v.s, offset)};
    v = ce_combine(v, other);
  }
  if (threadIdx.x % 32 == 0) warp_pairs[threadIdx.x / 32] = v;
  __syncthreads();
  MaxSum total = warp_pairs[0];
  for (int i = 1; i < kThreads / 32; ++i) total = ce_combine(total, warp_pairs[i]);
  return total;
}

template <typename T>
__global__ void cross_entropy_kernel(T* logits, const int64_t* labels, float* loss, int64_t vocab,
                                     int64_t ignore_index) {
  T* x = logits + static_cast<int64_t>(blockIdx.x) * vocab;
  const int64_t label = labels[blockIdx.x];
  if (label == ignore_index || label < 0 || label >= vocab) {
    const float fill = label == ignore_index ? 0.0f : nanf("");
    if (threadIdx.x == 0) loss[blockIdx.x] = fill;
    for (int64_t j = threadIdx.x; j < vocab; j += kThreads) x[j] = from_float<T>(fill);
    return;
  }
  MaxSum a{-INFINITY, 0.0f};
  for (int64_t j = threadIdx.x; j < vocab; j += kThreads) a = ce_push(a, to_float(x[j]));
  const float label_logit = to_float(x[label]);  // every thread reads it before the block's barrier
  const float lse = ce_logsumexp(block_combine(a));
  if (threadIdx.x == 0) loss[blockIdx.x] = lse - label_logit;
  for (int64_t j = threadIdx.x; j < vocab; j += kThreads) x[j] = from_float<T>(ce_grad(to_float(x[j]), lse, j == label));
}

}  // namespace

void cross_entropy_cuda(Dtype dtype, void* logits, const int64_t* labels, float* loss, int64_t rows, int64_t vocab,
                        int64_t ignore_index, void* stream) {
  if (rows == 0) return;
  const auto s = static_cast<cudaStream_t>(stream);
  const auto blocks = static_cast<unsigned>(rows);
  if (dtype == Dtype::kFloat) {
    cross_entropy_kernel<float><<<blocks, kThreads, 0, s>>>(static_cast<float*>(logits), labels, loss, vocab,
                                                            ignore_index);
  } else {
    cross_entropy_kernel<__nv_bfloat16><<<blocks, kThreads, 0, s>>>(static_cast<__nv_bfloat16*>(logits), labels, loss,
                                                                    vocab, ignore_index);
  }
  check_launch("cross entropy");
}

}  // namespace shardtune::kernels
