// AdamW's fused element update. Compiled with -ffp-contract=off (runtime/fsdp/CMakeLists.txt).
#include "runtime/fsdp/adamw_kernel.h"

#include <cmath>

#include "runtime/fsdp/widen.h"

namespace shardtune::fsdp {
namespace {

template <class G>
void update(float* __restrict p, const G* __restrict g, float* __restrict m, float* __restrict v, int64_t n,
            const AdamWScalars& s) {
  const AdamWScalars c = s;  // by value: the loop then keeps them in registers
  for (int64_t i = 0; i < n; ++i) {
    const float gi = widen(g[i]) * c.grad_scale;
    const float mi = m[i] * c.beta1 + gi * c.one_minus_beta1;
    const float vi = v[i] * c.beta2 + c.one_minus_beta2 * gi * gi;
    const float denom = std::sqrt(vi) / c.bias_correction2_sqrt + c.eps;
    p[i] = p[i] * c.decay + c.neg_step_size * (mi / denom);
    m[i] = mi;
    v[i] = vi;
  }
}

}  // namespace

void adamw_update(float* p, const float* g, float* m, float* v, int64_t n, const AdamWScalars& s) {
  update(p, g, m, v, n, s);
}

void adamw_update(float* p, const uint16_t* g_bf16, float* m, float* v, int64_t n, const AdamWScalars& s) {
  update(p, g_bf16, m, v, n, s);
}

}  // namespace shardtune::fsdp
