// Element types and reduction operators shared by every communicator (MPI on host memory, NCCL
// on raw device pointers); free of LibTorch so the NCCL layer builds against any LibTorch.
#pragma once

#include <cstddef>
#include <string_view>

namespace shardtune::dist {

enum class DType { kFloat32, kFloat64, kBFloat16, kFloat16, kInt32, kInt64, kUInt8 };

enum class ReduceOp { kSum, kAvg, kMax, kMin };

inline size_t element_size(DType t) {
  switch (t) {
    case DType::kFloat64:
    case DType::kInt64: return 8;
    case DType::kFloat32:
    case DType::kInt32: return 4;
    case DType::kBFloat16:
    case DType::kFloat16: return 2;
    case DType::kUInt8: return 1;
  }
  return 0;
}

inline bool is_floating(DType t) {
  return t == DType::kFloat32 || t == DType::kFloat64 || t == DType::kBFloat16 || t == DType::kFloat16;
}

inline std::string_view to_string(DType t) {
  switch (t) {
    case DType::kFloat32: return "fp32";
    case DType::kFloat64: return "fp64";
    case DType::kBFloat16: return "bf16";
    case DType::kFloat16: return "fp16";
    case DType::kInt32: return "int32";
    case DType::kInt64: return "int64";
    case DType::kUInt8: return "uint8";
  }
  return "?";
}

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
