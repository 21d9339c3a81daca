// Reduction operators shared by every communicator (MPI on host memory, NCCL on raw device
// pointers); the element types are common::Dtype. Free of LibTorch so the NCCL layer builds
// against any LibTorch.
#pragma once

#include <string_view>

#include "common/dtype.h"

namespace shardtune::dist {

enum class ReduceOp { kSum, kAvg, kMax, kMin };

inline std::string_view to_string(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return "sum";
    case ReduceOp::kAvg: return "avg";
    case ReduceOp::kMax: return "max";
    case ReduceOp::kMin: return "min";
  }
  return "?";
}

}  // namespace shardtune::dist
