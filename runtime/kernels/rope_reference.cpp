// Rotary position embedding on the host: the reference of the CUDA kernel (rope_math.h).
#include "runtime/kernels/rope_reference.h"

#include "runtime/kernels/rope_math.h"

namespace shardtune::kernels {

void rope_reference(const float* x, const float* cos, const float* sin, float* out, int64_t positions, int64_t heads,
                    int64_t head_dim, int64_t x_stride, int64_t out_stride, bool backward) {
  const int64_t half = head_dim / 2;
  for (int64_t p = 0; p < positions; ++p) {
    const float* c = cos + p * head_dim;
    const float* s = sin + p * head_dim;
    for (int64_t h = 0; h < heads; ++h) {
      const float* xr = x + p * x_stride + h * head_dim;
      float* o = out + p * out_stride + h * head_dim;
      for (int64_t i = 0; i < half; ++i) {
        const float x1 = xr[i], x2 = xr[i + half];  // read both before writing either (in place)
        if (backward) {
          rope_pair_grad(x1, x2, c[i], s[i], c[i + half], s[i + half], &o[i], &o[i + half]);
        } else {
          rope_pair(x1, x2, c[i], s[i], c[i + half], s[i + half], &o[i], &o[i + half]);
        }
      }
    }
  }
}

}  // namespace shardtune::kernels
