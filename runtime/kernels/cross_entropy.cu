// Cross-entropy's CUDA kernel: one block a row; each thread keeps a running (max, sum) over its
// runs of the row (cross_entropy_math.h), the block combines them, and a second pass writes the
// gradient over the logits. The label's logit is read before any thread writes.
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

// A run of kCeRun logits from `base` (fewer at the row's end) as fp32: one 16-byte pack of bf16 or
// two of fp32 where the row is whole runs and starts on 16 bytes (kPacked), else an element at a
// time. Returns how many.
template <typename T, bool kPacked>
__device__ inline int load_run(const T* x, int64_t base, int64_t vocab, float (&v)[kCeRun]) {
  if constexpr (kPacked) {
    constexpr int n = Pack<T>::kSize;
#pragma unroll
    for (int p = 0; p < kCeRun / n; ++p) {
      const Pack<T> pack = load_pack(x + base + p * n);
#pragma unroll
      for (int k = 0; k < n; ++k) v[p * n + k] = to_float(pack.v[k]);
    }
    return kCeRun;
  } else {
    const int count = vocab - base < kCeRun ? static_cast<int>(vocab - base) : kCeRun;
    for (int k = 0; k < count; ++k) v[k] = to_float(x[base + k]);
    return count;
  }
}

template <typename T, bool kPacked>
__device__ inline void store_run(T* x, int64_t base, int count, const float (&v)[kCeRun]) {
  if constexpr (kPacked) {
    constexpr int n = Pack<T>::kSize;
#pragma unroll
    for (int p = 0; p < kCeRun / n; ++p) {
      Pack<T> pack;
#pragma unroll
      for (int k = 0; k < n; ++k) pack.v[k] = from_float<T>(v[p * n + k]);
      store_pack(x + base + p * n, pack);
    }
  } else {
    for (int k = 0; k < count; ++k) x[base + k] = from_float<T>(v[k]);
  }
}

template <typename T, bool kPacked>
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
  // This thread's runs (cross_entropy_math.h): from threadIdx.x runs in, every kThreads runs.
  const int64_t first = static_cast<int64_t>(threadIdx.x) * kCeRun, stride = static_cast<int64_t>(kThreads) * kCeRun;
  float v[kCeRun];
  MaxSum a{-INFINITY, 0.0f};
  for (int64_t base = first; base < vocab; base += stride) {
    const int count = load_run<T, kPacked>(x, base, vocab, v);
    for (int k = 0; k < count; ++k) a = ce_push(a, v[k]);
  }
  const float label_logit = to_float(x[label]);  // every thread reads it before the block's barrier
  const float lse = ce_logsumexp(block_combine(a));
  if (threadIdx.x == 0) loss[blockIdx.x] = lse - label_logit;
  for (int64_t base = first; base < vocab; base += stride) {
    const int count = load_run<T, kPacked>(x, base, vocab, v);
    for (int k = 0; k < count; ++k) v[k] = ce_grad(v[k], lse, base + k == label);
    store_run<T, kPacked>(x, base, count, v);
  }
}

template <typename T>
void launch(T* logits, const int64_t* labels, float* loss, int64_t rows, int64_t vocab, int64_t ignore_index,
            cudaStream_t stream) {
  const auto blocks = static_cast<unsigned>(rows);
  if (vocab % kCeRun == 0 && aligned_16(logits)) {
    cross_entropy_kernel<T, true><<<blocks, kThreads, 0, stream>>>(logits, labels, loss, vocab, ignore_index);
  } else {
    cross_entropy_kernel<T, false><<<blocks, kThreads, 0, stream>>>(logits, labels, loss, vocab, ignore_index);
  }
}

}  // namespace

void cross_entropy_cuda(Dtype dtype, void* logits, const int64_t* labels, float* loss, int64_t rows, int64_t vocab,
                        int64_t ignore_index, void* stream) {
  if (rows == 0) return;
  const auto s = static_cast<cudaStream_t>(stream);
  if (dtype == Dtype::kFloat) {
    launch(static_cast<float*>(logits), labels, loss, rows, vocab, ignore_index, s);
  } else {
    launch(static_cast<__nv_bfloat16*>(logits), labels, loss, rows, vocab, ignore_index, s);
  }
  check_launch("cross entropy");
}

}  // namespace shardtune::kernels
