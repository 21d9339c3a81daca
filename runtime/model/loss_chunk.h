// How many logits the fused head computes at a time (runtime/model/fused_ops.h), by default: its
// rows go in chunks of at most this many (512 MiB of bf16), so that a micro-batch's logits never
// exist at once. The planner counts one chunk. No ATen.
#pragma once

#include <cstdint>

namespace shardtune::model {

constexpr int64_t kLossChunkLogits = int64_t{1} << 28;

}  // namespace shardtune::model
