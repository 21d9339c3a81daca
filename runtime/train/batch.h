// A micro-batch as the model consumes it.
#pragma once

#include <ATen/core/Tensor.h>

namespace shardtune::train {

struct Batch {
  at::Tensor input_ids;     // (B, T) int64
  at::Tensor labels;        // (B, T) int64, -100 where no loss is taken
  at::Tensor position_ids;  // (B, T) int64, restarting per packed document; or undefined
};

}  // namespace shardtune::train
