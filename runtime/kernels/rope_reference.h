// Rotary position embedding on the host in fp32: the reference of the CUDA kernel (rope_cuda.h),
// with its arithmetic (rope_math.h). x: (positions x heads x head_dim), positions x_stride
// elements apart (heads x head_dim where packed), each position's heads sharing one row of cos and
// sin (positions x head_dim); out likewise, positions out_stride apart; out may be x (in place). The
// gradient (`backward`) is the transposed rotation of the output's gradient. No ATen.
#pragma once

#include <cstdint>

namespace shardtune::kernels {

void rope_reference(const float* x, const float* cos, const float* sin, float* out, int64_t positions, int64_t heads,
                    int64_t head_dim, int64_t x_stride, int64_t out_stride, bool backward);

}  // namespace shardtune::kernels
