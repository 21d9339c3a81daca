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

// Where pair k of the (position, head, pair) triples lies: heads of 2 half elements, a position's
// heads side by side, positions `x_stride` elements apart in x and `out_stride` apart in out (the
// heads' count times 2 half where rows are packed; more where they are part of wider rows), and
// tables of one head's row a position. Its elements: x at x and x + half, out at out and
// out + half, the tables' entries at t and t + half. In elements, or in packs where `half` and
// the strides count packs (the packed kernel: pack k holds pairs k·n to k·n + n - 1). I: the
// index type.
template <typename I>
struct RopeOffsets {
  I x, out, t;
};
template <typename I>
ST_HD inline RopeOffsets<I> rope_offsets(I k, I heads, I half, I x_stride, I out_stride) {
  const I row = k / half, i = k - row * half, position = row / heads, head = row - position * heads;
  const I in_row = head * 2 * half + i;
  return {position * x_stride + in_row, position * out_stride + in_row, position * 2 * half + i};
}

ST_HD inline void rope_pair(float x1, float x2, float c1, float s1, float c2, float s2, float* o1, float* o2) {
  *o1 = x1 * c1 - x2 * s1;
  *o2 = x2 * c2 + x1 * s2;
}

ST_HD inline void rope_pair_grad(float d1, float d2, float c1, float s1, float c2, float s2, float* g1, float* g2) {
  *g1 = d1 * c1 + d2 * s2;
  *g2 = d2 * c2 - d1 * s1;
}

}  // namespace shardtune::kernels
