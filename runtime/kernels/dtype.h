// The element types the CUDA kernels take (their arithmetic is fp32 whatever the arrays hold).
#pragma once

namespace shardtune::kernels {

enum class Dtype { kFloat, kBFloat16 };

}  // namespace shardtune::kernels
