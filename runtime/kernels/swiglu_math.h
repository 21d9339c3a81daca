// SwiGLU's arithmetic, one element at a time, as the CUDA kernel (swiglu.cu) and the host
// reference (swiglu_reference.cpp) both compute it, in fp32:
//   s = 1 / (1 + exp(-g))      h = g * s * u
//   dg = dh * u * s * (1 + g * (1 - s))      du = dh * g * s
// The backward recomputes s from g: nothing but g and u is kept from the forward.
#pragma once

#include <cmath>

#include "runtime/kernels/hd.h"

namespace shardtune::kernels {

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
