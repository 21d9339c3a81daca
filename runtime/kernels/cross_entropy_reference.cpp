// Cross-entropy on the host: the reference of the CUDA kernel, with its arithmetic and its grouping
// of each row (cross_entropy_math.h).
#include "runtime/kernels/cross_entropy_reference.h"

#include <array>
#include <limits>

#include "runtime/kernels/cross_entropy_math.h"

namespace shardtune::kernels {
namespace {

// The row's (max, sum) as the kernel's block forms it: lanes, warps by halving, warps in order.
MaxSum row_max_sum(const float* x, int64_t vocab) {
  std::array<MaxSum, kCeLanes> lanes;
  lanes.fill({-std::numeric_limits<float>::infinity(), 0.0f});
  for (int64_t j = 0; j < vocab; ++j) lanes[ce_lane(j)] = ce_push(lanes[ce_lane(j)], x[j]);
  MaxSum total{-std::numeric_limits<float>::infinity(), 0.0f};
  for (int warp = 0; warp < kCeLanes / 32; ++warp) {
    MaxSum* w = lanes.data() + warp * 32;
    for (int offset = 16; offset > 0; offset >>= 1)
      for (int i = 0; i < offset; ++i) w[i] = ce_combine(w[i], w[i + offset]);
    total = warp == 0 ? w[0] : ce_combine(total, w[0]);
  }
  return total;
}

}  // namespace

void cross_entropy_reference(const float* logits, const int64_t* labels, float* loss, float* grad, int64_t rows,
                             int64_t vocab, int64_t ignore_index) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (int64_t r = 0; r < rows; ++r) {
    const float* x = logits + r * vocab;
    float* g = grad + r * vocab;
    const int64_t label = labels[r];
    if (label == ignore_index || label < 0 || label >= vocab) {
      const float fill = label == ignore_index ? 0.0f : nan;
      loss[r] = fill;
      for (int64_t j = 0; j < vocab; ++j) g[j] = fill;
      continue;
    }
    const float lse = ce_logsumexp(row_max_sum(x, vocab));
    loss[r] = lse - x[label];  // read before the gradient overwrites it
    for (int64_t j = 0; j < vocab; ++j) g[j] = ce_grad(x[j], lse, j == label);
  }
}

}  // namespace shardtune::kernels
