// The 8-bit block-wise Adam update on the host. Compiled with -ffp-contract=off
// (runtime/fsdp/CMakeLists.txt): every operation rounds to fp32 on its own.
#include "runtime/fsdp/adam8bit.h"

#include <algorithm>
#include <cfloat>
#include <cmath>

#include "runtime/kernels/widen.h"
#include "runtime/quant/dynamic_map.h"

namespace shardtune::fsdp {

using kernels::widen;
namespace {


template <class G>
void update(float* p, const G* g, uint8_t* c1, uint8_t* c2, float* a1, float* a2, int64_t n,
            const Adam8bitScalars& s) {
  const std::array<float, 256>&m1 = quant::dynamic_map(true), &m2 = quant::dynamic_map(false);
  const quant::CodeTable &t1 = code_table(true), &t2 = code_table(false);
  float s1[kAdam8bitBlock], s2[kAdam8bitBlock];
  bool finite[kAdam8bitBlock];
  for (int64_t begin = 0, b = 0; begin < n; begin += kAdam8bitBlock, ++b) {
    const int64_t valid = std::min(kAdam8bitBlock, n - begin);
    float max1 = -FLT_MAX, max2 = -FLT_MAX;
    for (int64_t j = 0; j < kAdam8bitBlock; ++j) {
      // Past the tensor's end: bitsandbytes' phantom elements.
      const float gj = j < valid ? widen(g[begin + j]) : 0.0f;
      const uint8_t q1 = j < valid ? c1[begin + j] : 128, q2 = j < valid ? c2[begin + j] : 0;
      finite[j] = std::isfinite(gj);
      if (finite[j]) {
        const float v = m2[q2] * a2[b];
        s2[j] = v * s.beta2 + s.one_minus_beta2 * gj * gj;
        const float m = m1[q1] * a1[b];
        s1[j] = m * s.beta1 + s.one_minus_beta1 * gj;
      } else {
        s1[j] = 0.0f;
        s2[j] = 0.0f;
      }
      // fmax's result without its call: the running maximum is never NaN, and both skip a NaN value.
      max1 = std::max(max1, std::fabs(s1[j]));
      max2 = std::max(max2, std::fabs(s2[j]));
    }
    a1[b] = max1;
    a2[b] = max2;
    for (int64_t j = 0; j < valid; ++j) {
      if (!finite[j]) continue;
      float pj = p[begin + j] + s.step_size * (s1[j] / (std::sqrt(s2[j]) + s.c2_eps));
      if (s.decays) pj = pj * s.decay;
      p[begin + j] = pj;
    }
    for (int64_t j = 0; j < kAdam8bitBlock; ++j) {
      uint8_t q1 = t1.code(s1[j] / max1);
      if (std::signbit(m1[q1]) != std::signbit(s1[j])) q1 = static_cast<uint8_t>(s1[j] > 0.0f ? q1 + 1 : q1 - 1);
      c1[begin + j] = q1;
      c2[begin + j] = t2.code(s2[j] / max2);
    }
  }
}

template <class G>
void update32(float* p, const G* g, float* m, float* v, int64_t n, const Adam8bitScalars& s) {
  const Adam8bitScalars c = s;
  for (int64_t i = 0; i < n; ++i) {
    const float gi = widen(g[i]);
    const float mi = m[i] * c.beta1 + c.one_minus_beta1 * gi;
    const float vi = v[i] * c.beta2 + c.one_minus_beta2 * (gi * gi);
    float pi = p[i] + c.step_size * (mi / (std::sqrt(vi) + c.c2_eps));
    if (c.decays) pi = pi * c.decay;
    p[i] = pi;
    m[i] = mi;
    v[i] = vi;
  }
}

}  // namespace

void adam32bit_update(float* p, const float* g, float* m, float* v, int64_t n, const Adam8bitScalars& s) {
  update32(p, g, m, v, n, s);
}

void adam32bit_update(float* p, const uint16_t* g_bf16, float* m, float* v, int64_t n, const Adam8bitScalars& s) {
  update32(p, g_bf16, m, v, n, s);
}

uint8_t encode(const std::array<float, 256>& map, float x, bool is_signed) {
  return quant::search_code(map, x, is_signed ? -1.0f : 0.0f, /*ends_from_map=*/false);
}

const quant::CodeTable& code_table(bool is_signed) {
  static const quant::CodeTable kSigned(quant::dynamic_map(true), -1.0f, false),
      kUnsigned(quant::dynamic_map(false), 0.0f, false);
  return is_signed ? kSigned : kUnsigned;
}

Adam8bitScalars adam8bit_scalars(double lr, double beta1, double beta2, double eps, double weight_decay, int64_t step) {
  Adam8bitScalars s{};
  s.beta1 = static_cast<float>(beta1);
  s.beta2 = static_cast<float>(beta2);
  s.one_minus_beta1 = 1.0f - s.beta1;
  s.one_minus_beta2 = 1.0f - s.beta2;
  const auto t = static_cast<double>(step);
  const auto c1 = static_cast<float>(1.0 - std::pow(beta1, t));
  const auto c2 = static_cast<float>(std::sqrt(1.0 - std::pow(beta2, t)));
  const auto lr32 = static_cast<float>(lr);
  s.c2_eps = c2 * static_cast<float>(eps);
  s.step_size = (-lr32 * c2) / c1;
  s.decays = weight_decay > 0;
  s.decay = 1.0f - lr32 * static_cast<float>(weight_decay);
  return s;
}

void adam8bit_update(float* p, const float* g, uint8_t* c1, uint8_t* c2, float* a1, float* a2, int64_t n,
                     const Adam8bitScalars& s) {
  update(p, g, c1, c2, a1, a2, n, s);
}

void adam8bit_update(float* p, const uint16_t* g_bf16, uint8_t* c1, uint8_t* c2, float* a1, float* a2, int64_t n,
                     const Adam8bitScalars& s) {
  update(p, g_bf16, c1, c2, a1, a2, n, s);
}

}  // namespace shardtune::fsdp
