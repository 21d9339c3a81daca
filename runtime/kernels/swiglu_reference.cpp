// SwiGLU on the host: the reference of the CUDA kernels, with their arithmetic (swiglu_math.h).
#include "runtime/kernels/swiglu_reference.h"

#include "runtime/kernels/swiglu_math.h"

namespace shardtune::kernels {

void swiglu_forward_reference(const float* g, const float* u, float* h, int64_t count) {
  for (int64_t i = 0; i < count; ++i) h[i] = swiglu_value(g[i], u[i]);
}

void swiglu_backward_reference(const float* g, const float* u, const float* dh, float* dg, float* du, int64_t count) {
  for (int64_t i = 0; i < count; ++i) swiglu_grads(g[i], u[i], dh[i], &dg[i], &du[i]);
}

}  // namespace shardtune::kernels
