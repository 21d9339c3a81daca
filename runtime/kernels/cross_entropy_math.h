// Cross-entropy's arithmetic, one row of logits at a time, as the CUDA kernel (cross_entropy.cu)
// and the host reference (cross_entropy_reference.cpp) both compute it, in fp32:
//   lse = log(sum_j exp(x_j)), by a running maximum m and the sum s of exp(x_j - m): lse = m + log s
//   loss = lse - x_label                      (0 for an ignored row)
//   dx_j = exp(x_j - lse) - [j == label]      (0 for an ignored row)
// Partial (m, s) pairs combine in any grouping. Both sides group a row alike: kCeLanes lanes, lane
// i taking the logits in runs of kCeRun, in order: i·kCeRun to i·kCeRun + kCeRun - 1, then the run
// kCeLanes runs further on, and so on (so that the kernel loads a run of bf16 as one 16-byte
// access); the lanes of each warp of 32 combined by halving (lane i with lane i + 16, then i + 8,
// ...), the warps then in order. Each (m, s) is so made of at most kCeRun·ceil(vocab / (kCeLanes·
// kCeRun)) + 5 + 15 <= ceil(vocab / kCeLanes) + 7 + 20 steps, which bounds its rounding.
#pragma once

#include <cmath>
#include <cstdint>

#include "runtime/kernels/hd.h"

namespace shardtune::kernels {

constexpr int kCeLanes = 512;
constexpr int kCeRun = 8;

// The lane that takes logit j.
ST_HD inline int64_t ce_lane(int64_t j) { return (j / kCeRun) % kCeLanes; }

struct MaxSum {
  float m;  // the largest logit seen (-inf before any)
  float s;  // sum of exp(x - m) over the logits seen
};

ST_HD inline float ce_exp(float v) {
#ifdef __CUDA_ARCH__
  return expf(v);
#else
  return std::exp(v);
#endif
}

ST_HD inline MaxSum ce_push(MaxSum a, float x) {
  if (x > a.m) return {x, a.s * ce_exp(a.m - x) + 1.0f};
  return {a.m, a.s + ce_exp(x - a.m)};
}

ST_HD inline MaxSum ce_combine(MaxSum a, MaxSum b) {
  if (b.s == 0.0f) return a;
  if (a.s == 0.0f) return b;
  if (a.m >= b.m) return {a.m, a.s + b.s * ce_exp(b.m - a.m)};
  return {b.m, b.s + a.s * ce_exp(a.m - b.m)};
}

ST_HD inline float ce_logsumexp(MaxSum a) {
#ifdef __CUDA_ARCH__
  return a.m + logf(a.s);
#else
  return a.m + std::log(a.s);
#endif
}

ST_HD inline float ce_grad(float x, float lse, bool is_label) { return ce_exp(x - lse) - (is_label ? 1.0f : 0.0f); }

}  // namespace shardtune::kernels
