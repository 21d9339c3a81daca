// SwiGLU's arithmetic, one element at a time, as the CUDA kernel (swiglu.cu) and the host
// reference (swiglu_reference.cpp) both compute it, in fp32:
//   s = 1 / (1 + exp(-g))      h = g * s * u
//   dg = dh * u * s * (1 + g * (1 - s))      du = dh * g * s
// The backward recomputes s from g: nothing but g and u is kept from the forward.
#pragma once

#include <cmath>
#include <cstdint>

#include "runtime/kernels/hd.h"

namespace shardtune::kernels {

// Where the elements lie: (rows, cols) of h and dh, contiguous; row r of g and u (and of dg and
// du) starts r * in_stride (out_stride) elements after the array's start. Separate contiguous
// arrays are one row of all the elements; Llama's gate and up side by side in one (rows, 2 cols)
// product are g = gu, u = gu + cols with strides of 2 cols, and so are their gradients.
struct SwigluLayout {
  int64_t rows = 0, cols = 0;
  int64_t in_stride = 0, out_stride = 0;
  static SwigluLayout contiguous(int64_t count) { return {1, count, count, count}; }
  static SwigluLayout joined(int64_t rows, int64_t cols) { return {rows, cols, 2 * cols, 2 * cols}; }
};

// Element i of h (row i / cols) in an array of rows `stride` apart; I the index type (the GPU
// kernels take 32 bits where every offset fits).
template <typename I>
ST_HD inline I swiglu_offset(I i, I cols, I stride) {
  const I r = i / cols;
  return r * stride + (i - r * cols);
}

ST_HD inline float swiglu_sigmoid(float g) {
#ifdef __CUDA_ARCH__
  return 1.0f / (1.0f + expf(-g));
#else
  return 1.0f / (1.0f + std::exp(-g));
#endif
}

ST_HD inline float swiglu_value(float g, float u) { return g * swiglu_sigmoid(g) * u; }

ST_HD inline void swiglu_grads(float g, float u, float dh, float* dg, float* du) {
  const float s = swiglu_sigmoid(g);
  *dg = dh * u * (s * (1.0f + g * (1.0f - s)));
  *du = dh * (g * s);
}

}  // namespace shardtune::kernels
