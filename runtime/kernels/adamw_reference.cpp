// AdamW's fused element update on the host. Compiled with -ffp-contract=off
// (runtime/kernels/CMakeLists.txt).
#include "runtime/kernels/adamw_reference.h"

#include <cmath>

#include "runtime/kernels/widen.h"

namespace shardtune::kernels {
namespace {

template <class G>
void update(float* __restrict p, const G* __restrict g, float* __restrict m, float* __restrict v, int64_t n,
            const AdamWScalars& s) {
  const AdamWScalars c = s;  // by value: the loop then keeps them in registers
  for (int64_t i = 0; i < n; ++i) adamw_element(p[i], widen(g[i]), m[i], v[i], c);
}

}  // namespace

void adamw_update(float* p, const float* g, float* m, float* v, int64_t n, const AdamWScalars& s) {
  update(p, g, m, v, n, s);
}

void adamw_update(float* p, const uint16_t* g_bf16, float* m, float* v, int64_t n, const AdamWScalars& s) {
  update(p, g_bf16, m, v, n, s);
}

}  // namespace shardtune::kernels
