// SwiGLU on the host: the reference of the CUDA kernels, with their arithmetic (swiglu_math.h).
#include "runtime/kernels/swiglu_reference.h"

#include "runtime/kernels/swiglu_math.h"

namespace shardtune::kernels {

void swiglu_forward_reference(const SwigluLayout& l, const float* g, const float* u, float* h) {
  for (int64_t i = 0; i < l.rows * l.cols; ++i) {
    const int64_t in = swiglu_offset(i, l.cols, l.in_stride);
    h[i] = swiglu_value(g[in], u[in]);
  }
}

void swiglu_backward_reference(const SwigluLayout& l, const float* g, const float* u, const float* dh, float* dg,
                               float* du) {
  for (int64_t i = 0; i < l.rows * l.cols; ++i) {
    const int64_t in = swiglu_offset(i, l.cols, l.in_stride), out = swiglu_offset(i, l.cols, l.out_stride);
    swiglu_grads(g[in], u[in], dh[i], &dg[out], &du[out]);
  }
}

}  // namespace shardtune::kernels
