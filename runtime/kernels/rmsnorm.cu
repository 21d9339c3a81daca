// RMSNorm's CUDA kernels: one block a row for the forward and the input gradient (a block sum of
// the row, then every element); the weight gradient summed over rows in chunks and then over the
// chunks, each in a fixed order, so that a rerun gives the same bits. The forward and the input
// gradient in packs of 16 bytes where the rows are whole packs and the arrays start on 16 bytes.
// The residual stream's sum rides in both: the forward adds the residual to the input first, and
// the input gradient adds the residual's gradient to its own.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "runtime/kernels/device_util.cuh"
#include "runtime/kernels/rmsnorm_cuda.h"
#include "runtime/kernels/rmsnorm_math.h"

namespace shardtune::kernels {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxChunks = 128;  // row chunks of the weight gradient's first pass

// The block's sum: within each warp by shuffles, then the warps' sums in warp order, by every
// thread alike.
__device__ float block_sum(float v) {
  __shared__ float warp_sums[kThreads / 32];
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  if (threadIdx.x % 32 == 0) warp_sums[threadIdx.x / 32] = v;
  __syncthreads();
  float total = 0;
  for (int i = 0; i < kThreads / 32; ++i) total += warp_sums[i];
  __syncthreads();  // warp_sums is reused by the next call
  return total;
}

// The row's input: x, or x + res rounded to T (written to `sum`, which the second pass reads back:
// each thread the elements it wrote).
template <typename T, bool kAdd>
__device__ inline float row_input(const T* xr, const T* rr, T* sr, int64_t i) {
  if (!kAdd) return to_float(xr[i]);
  const T v = from_float<T>(to_float(xr[i]) + to_float(rr[i]));
  sr[i] = v;
  return to_float(v);
}

template <typename T, bool kAdd>
__global__ void forward_kernel(const T* x, const T* res, T* sum_out, const T* w, T* y, float* inv, int64_t n,
                               float eps) {
  const T* xr = x + blockIdx.x * n;
  const T* rr = kAdd ? res + blockIdx.x * n : nullptr;
  T* sr = kAdd ? sum_out + blockIdx.x * n : nullptr;
  T* yr = y + blockIdx.x * n;
  float sum = 0;
  for (int64_t i = threadIdx.x; i < n; i += kThreads) {
    const float v = row_input<T, kAdd>(xr, rr, sr, i);
    sum += v * v;
  }
  const float r = rms_inverse(block_sum(sum), n, eps);
  if (threadIdx.x == 0) inv[blockIdx.x] = r;
  const T* in = kAdd ? sr : xr;
  // x * inv rounded to T before the weight multiplies it, as transformers does.
  for (int64_t i = threadIdx.x; i < n; i += kThreads)
    yr[i] = from_float<T>(to_float(w[i]) * to_float(from_float<T>(to_float(in[i]) * r)));
}

// The input gradient, plus the gradient that reached the norm's input by another way (dres, the
// residual stream's) where there is one, rounded to T once.
template <typename T, bool kRes>
__global__ void grad_input_kernel(const T* x, const T* w, const float* inv, const T* dy, const T* dres, T* dx,
                                  int64_t n) {
  const T* xr = x + blockIdx.x * n;
  const T* dyr = dy + blockIdx.x * n;
  const T* drr = kRes ? dres + blockIdx.x * n : nullptr;
  T* dxr = dx + blockIdx.x * n;
  float dot = 0;
  for (int64_t i = threadIdx.x; i < n; i += kThreads) dot += to_float(xr[i]) * to_float(w[i]) * to_float(dyr[i]);
  const float mean = block_sum(dot) / static_cast<float>(n);
  const float r = inv[blockIdx.x];
  for (int64_t i = threadIdx.x; i < n; i += kThreads) {
    const float g = rmsnorm_grad_input(to_float(xr[i]), to_float(w[i]), to_float(dyr[i]), r, mean);
    dxr[i] = from_float<T>(kRes ? g + to_float(drr[i]) : g);
  }
}

// The forward and the input gradient a pack (16 bytes) at a time, where a row is whole packs and
// every array starts on 16 bytes; the same arithmetic, each thread's share of a row's sum taken in
// another order.
template <typename T, bool kAdd>
__device__ inline Pack<T> row_input_pack(const T* xr, const T* rr, T* sr, int64_t i) {
  const Pack<T> a = load_pack(xr + i);
  if (!kAdd) return a;
  const Pack<T> b = load_pack(rr + i);
  Pack<T> s;
#pragma unroll
  for (int e = 0; e < Pack<T>::kSize; ++e) s.v[e] = from_float<T>(to_float(a.v[e]) + to_float(b.v[e]));
  store_pack(sr + i, s);
  return s;
}

template <typename T, bool kAdd>
__global__ void forward_packed(const T* x, const T* res, T* sum_out, const T* w, T* y, float* inv, int64_t n,
                               float eps) {
  constexpr int k = Pack<T>::kSize;
  const T* xr = x + blockIdx.x * n;
  const T* rr = kAdd ? res + blockIdx.x * n : nullptr;
  T* sr = kAdd ? sum_out + blockIdx.x * n : nullptr;
  T* yr = y + blockIdx.x * n;
  float sum = 0;
  for (int64_t i = threadIdx.x * k; i < n; i += kThreads * k) {
    const Pack<T> a = row_input_pack<T, kAdd>(xr, rr, sr, i);
#pragma unroll
    for (int e = 0; e < k; ++e) sum += to_float(a.v[e]) * to_float(a.v[e]);
  }
  const float r = rms_inverse(block_sum(sum), n, eps);
  if (threadIdx.x == 0) inv[blockIdx.x] = r;
  const T* in = kAdd ? sr : xr;
  for (int64_t i = threadIdx.x * k; i < n; i += kThreads * k) {
    const Pack<T> a = load_pack(in + i), b = load_pack(w + i);
    Pack<T> o;
#pragma unroll
    for (int e = 0; e < k; ++e)
      o.v[e] = from_float<T>(to_float(b.v[e]) * to_float(from_float<T>(to_float(a.v[e]) * r)));
    store_pack(yr + i, o);
  }
}

template <typename T, bool kRes>
__global__ void grad_input_packed(const T* x, const T* w, const float* inv, const T* dy, const T* dres, T* dx,
                                  int64_t n) {
  constexpr int k = Pack<T>::kSize;
  const T* xr = x + blockIdx.x * n;
  const T* dyr = dy + blockIdx.x * n;
  const T* drr = kRes ? dres + blockIdx.x * n : nullptr;
  T* dxr = dx + blockIdx.x * n;
  float dot = 0;
  for (int64_t i = threadIdx.x * k; i < n; i += kThreads * k) {
    const Pack<T> a = load_pack(xr + i), b = load_pack(w + i), d = load_pack(dyr + i);
#pragma unroll
    for (int e = 0; e < k; ++e) dot += to_float(a.v[e]) * to_float(b.v[e]) * to_float(d.v[e]);
  }
  const float mean = block_sum(dot) / static_cast<float>(n);
  const float r = inv[blockIdx.x];
  for (int64_t i = threadIdx.x * k; i < n; i += kThreads * k) {
    const Pack<T> a = load_pack(xr + i), b = load_pack(w + i), d = load_pack(dyr + i);
    Pack<T> o;
    if (kRes) {
      const Pack<T> c = load_pack(drr + i);
#pragma unroll
      for (int e = 0; e < k; ++e)
        o.v[e] = from_float<T>(rmsnorm_grad_input(to_float(a.v[e]), to_float(b.v[e]), to_float(d.v[e]), r, mean) +
                               to_float(c.v[e]));
    } else {
#pragma unroll
      for (int e = 0; e < k; ++e)
        o.v[e] = from_float<T>(rmsnorm_grad_input(to_float(a.v[e]), to_float(b.v[e]), to_float(d.v[e]), r, mean));
    }
    store_pack(dxr + i, o);
  }
}

// workspace[c][j]: the sum over chunk c's rows of dy * (x * inv rounded to T), column j.
template <typename T>
__global__ void grad_weight_chunks(const T* x, const float* inv, const T* dy, float* workspace, int64_t rows,
                                   int64_t n, int64_t rows_per_chunk) {
  const int64_t j = blockIdx.x * static_cast<int64_t>(kThreads) + threadIdx.x;
  if (j >= n) return;
  const int64_t first = blockIdx.y * rows_per_chunk;
  const int64_t last = first + rows_per_chunk < rows ? first + rows_per_chunk : rows;
  float sum = 0;
  for (int64_t r = first; r < last; ++r)
    sum += to_float(dy[r * n + j]) * to_float(from_float<T>(to_float(x[r * n + j]) * inv[r]));
  workspace[blockIdx.y * n + j] = sum;
}

__global__ void sum_chunks(const float* workspace, float* dw, int64_t chunks, int64_t n) {
  const int64_t j = blockIdx.x * static_cast<int64_t>(kThreads) + threadIdx.x;
  if (j >= n) return;
  float sum = 0;
  for (int64_t c = 0; c < chunks; ++c) sum += workspace[c * n + j];
  dw[j] = sum;
}

int64_t chunks_of(int64_t rows) { return rows < kMaxChunks ? rows : kMaxChunks; }

unsigned column_blocks(int64_t n) { return static_cast<unsigned>((n + kThreads - 1) / kThreads); }

template <typename T, bool kAdd>
void forward(const T* x, const T* res, T* sum, const T* w, T* y, float* inv, int64_t rows, int64_t n, float eps,
             cudaStream_t stream) {
  const bool packed = n % Pack<T>::kSize == 0 && aligned_16(x) && aligned_16(w) && aligned_16(y) &&
                      (!kAdd || (aligned_16(res) && aligned_16(sum)));
  const auto blocks = static_cast<unsigned>(rows);
  if (packed) {
    forward_packed<T, kAdd><<<blocks, kThreads, 0, stream>>>(x, res, sum, w, y, inv, n, eps);
  } else {
    forward_kernel<T, kAdd><<<blocks, kThreads, 0, stream>>>(x, res, sum, w, y, inv, n, eps);
  }
  check_launch("rmsnorm forward");
}

template <typename T>
void forward(const void* x, const void* res, void* sum, const void* w, void* y, float* inv, int64_t rows, int64_t n,
             float eps, cudaStream_t stream) {
  if (rows == 0 || n == 0) return;
  const auto *xp = static_cast<const T*>(x), *rp = static_cast<const T*>(res), *wp = static_cast<const T*>(w);
  auto *sp = static_cast<T*>(sum), *yp = static_cast<T*>(y);
  if (res != nullptr) {
    forward<T, true>(xp, rp, sp, wp, yp, inv, rows, n, eps, stream);
  } else {
    forward<T, false>(xp, rp, sp, wp, yp, inv, rows, n, eps, stream);
  }
}

template <typename T, bool kRes>
void grad_input(const T* x, const T* w, const float* inv, const T* dy, const T* dres, T* dx, int64_t rows, int64_t n,
                cudaStream_t stream) {
  const bool packed = n % Pack<T>::kSize == 0 && aligned_16(x) && aligned_16(w) && aligned_16(dy) &&
                      aligned_16(dx) && (!kRes || aligned_16(dres));
  const auto blocks = static_cast<unsigned>(rows);
  if (packed) {
    grad_input_packed<T, kRes><<<blocks, kThreads, 0, stream>>>(x, w, inv, dy, dres, dx, n);
  } else {
    grad_input_kernel<T, kRes><<<blocks, kThreads, 0, stream>>>(x, w, inv, dy, dres, dx, n);
  }
  check_launch("rmsnorm input gradient");
}

template <typename T>
void backward(const void* x, const void* w, const float* inv, const void* dy, const void* dres, void* dx, float* dw,
              float* workspace, int64_t rows, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  const auto *xp = static_cast<const T*>(x), *wp = static_cast<const T*>(w), *dyp = static_cast<const T*>(dy);
  const auto* drp = static_cast<const T*>(dres);
  auto* dxp = static_cast<T*>(dx);
  if (rows > 0) {
    if (dres != nullptr) {
      grad_input<T, true>(xp, wp, inv, dyp, drp, dxp, rows, n, stream);
    } else {
      grad_input<T, false>(xp, wp, inv, dyp, drp, dxp, rows, n, stream);
    }
  }
  const int64_t chunks = chunks_of(rows);
  if (chunks > 0) {
    const int64_t per_chunk = (rows + chunks - 1) / chunks;
    grad_weight_chunks<T><<<dim3(column_blocks(n), static_cast<unsigned>(chunks)), kThreads, 0, stream>>>(
        xp, inv, dyp, workspace, rows, n, per_chunk);
    check_launch("rmsnorm weight gradient (chunks)");
  }
  sum_chunks<<<column_blocks(n), kThreads, 0, stream>>>(workspace, dw, chunks, n);
  check_launch("rmsnorm weight gradient (sum)");
}

}  // namespace

void rmsnorm_forward_cuda(Dtype dtype, const void* x, const void* res, void* sum, const void* w, void* y, float* inv,
                          int64_t rows, int64_t n, float eps, void* stream) {
  const auto s = static_cast<cudaStream_t>(stream);
  if (dtype == Dtype::kFloat) {
    forward<float>(x, res, sum, w, y, inv, rows, n, eps, s);
  } else {
    forward<__nv_bfloat16>(x, res, sum, w, y, inv, rows, n, eps, s);
  }
}

int64_t rmsnorm_backward_workspace(int64_t rows, int64_t n) { return chunks_of(rows) * n; }

void rmsnorm_backward_cuda(Dtype dtype, const void* x, const void* w, const float* inv, const void* dy,
                           const void* dres, void* dx, float* dw, float* workspace, int64_t rows, int64_t n,
                           void* stream) {
  const auto s = static_cast<cudaStream_t>(stream);
  if (dtype == Dtype::kFloat) {
    backward<float>(x, w, inv, dy, dres, dx, dw, workspace, rows, n, s);
  } else {
    backward<__nv_bfloat16>(x, w, inv, dy, dres, dx, dw, workspace, rows, n, s);
  }
}

}  // namespace shardtune::kernels
