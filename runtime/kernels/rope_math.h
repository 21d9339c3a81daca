// Rotary position embedding's arithmetic, one pair of elements (i, i + D/2) of a head at a time,
// as the CUDA kernel (rope.cu) and the host reference (rope_reference.cpp) both compute it, in
// fp32, with the cos and sin tables of that position (transformers' rotate_half form):
//   o1 = x1 * c1 - x2 * s1        o2 = x2 * c2 + x1 * s2
// and its transpose for the gradient:
//   g1 = d1 * c1 + d2 * s2        g2 = d2 * c2 - d1 * s1
// (with Llama's tables, whose halves repeat, the gradient is the rotation by -sin).
#pragma once

#include "runtime/kernels/hd.h"

namespace shardtune::kernels {

ST_HD inline void rope_pair(float x1, float x2, float c1, float s1, float c2, float s2, float* o1, float* o2) {
  *o1 = x1 * c1 - x2 * s1;
  *o2 = x2 * c2 + x1 * s2;
}

ST_HD inline void rope_pair_grad(float d1, float d2, float c1, float s1, float c2, float s2, float* g1, float* g2) {
  *g1 = d1 * c1 + d2 * s2;
  *g2 = d2 * c2 - d1 * s1;
}

}  // namespace shardtune::kernels
