// MPI datatypes and the bf16/fp16 reduction operators.
#include "runtime/dist/mpi_dtype.h"

#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>
#include <fmt/format.h>

#include <algorithm>

#include "common/error.h"
#include "runtime/dist/mpi_check.h"

namespace shardtune::dist {
namespace {

// inout[i] = combine(in[i], inout[i]) computed in fp32, rounded back to T.
template <class T, class Combine>
void reduce_16bit(void* in, void* inout, int* len, MPI_Datatype*) {
  const T* a = static_cast<const T*>(in);
  T* b = static_cast<T*>(inout);
  for (int i = 0; i < *len; ++i) b[i] = T(Combine{}(static_cast<float>(a[i]), static_cast<float>(b[i])));
}

struct Plus {
  float operator()(float a, float b) const { return a + b; }
};
struct Max {
  float operator()(float a, float b) const { return std::max(a, b); }
};
struct Min {
  float operator()(float a, float b) const { return std::min(a, b); }
};

struct SixteenBitTypes {
  MPI_Datatype bf16 = MPI_DATATYPE_NULL;
  MPI_Datatype fp16 = MPI_DATATYPE_NULL;
  MPI_Op bf16_sum, bf16_max, bf16_min, fp16_sum, fp16_max, fp16_min;

  SixteenBitTypes() {
    ST_MPI_CHECK(MPI_Type_contiguous(2, MPI_BYTE, &bf16));
    ST_MPI_CHECK(MPI_Type_commit(&bf16));
    ST_MPI_CHECK(MPI_Type_contiguous(2, MPI_BYTE, &fp16));
    ST_MPI_CHECK(MPI_Type_commit(&fp16));
    ST_MPI_CHECK(MPI_Op_create(&reduce_16bit<c10::BFloat16, Plus>, /*commute=*/1, &bf16_sum));
    ST_MPI_CHECK(MPI_Op_create(&reduce_16bit<c10::BFloat16, Max>, 1, &bf16_max));
    ST_MPI_CHECK(MPI_Op_create(&reduce_16bit<c10::BFloat16, Min>, 1, &bf16_min));
    ST_MPI_CHECK(MPI_Op_create(&reduce_16bit<c10::Half, Plus>, 1, &fp16_sum));
    ST_MPI_CHECK(MPI_Op_create(&reduce_16bit<c10::Half, Max>, 1, &fp16_max));
    ST_MPI_CHECK(MPI_Op_create(&reduce_16bit<c10::Half, Min>, 1, &fp16_min));
  }
};

// Created on first use (after MPI_Init); MPI_Finalize releases them.
const SixteenBitTypes& sixteen_bit() {
  static const SixteenBitTypes types;
  return types;
}

MPI_Op builtin_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg: return MPI_SUM;
    case ReduceOp::kMax: return MPI_MAX;
    case ReduceOp::kMin: return MPI_MIN;
  }
  return MPI_OP_NULL;
}

}  // namespace

MPI_Datatype mpi_datatype(common::Dtype t) {
  switch (t) {
    case common::Dtype::kF32: return MPI_FLOAT;
    case common::Dtype::kF64: return MPI_DOUBLE;
    case common::Dtype::kI32: return MPI_INT32_T;
    case common::Dtype::kI64: return MPI_INT64_T;
    case common::Dtype::kU8: return MPI_UINT8_T;
    case common::Dtype::kBF16: return sixteen_bit().bf16;
    case common::Dtype::kF16: return sixteen_bit().fp16;
    case common::Dtype::kI16: return MPI_INT16_T;
    case common::Dtype::kI8: return MPI_INT8_T;
    case common::Dtype::kBool: return MPI_UINT8_T;
    case common::Dtype::kF8E4M3:
    case common::Dtype::kF8E5M2: break;
  }
  common::raise(common::ErrorKind::kInternal, fmt::format("collectives do not carry {} tensors", short_name(t)));
}

MPI_Op mpi_op(common::Dtype t, ReduceOp op) {
  ST_CHECK(op != ReduceOp::kAvg || is_floating(t), common::ErrorKind::kInternal,
           "avg reduction of {} tensors: average floating-point tensors only", short_name(t));
  if (t == common::Dtype::kBF16 || t == common::Dtype::kF16) {
    const SixteenBitTypes& s = sixteen_bit();
    const bool bf = t == common::Dtype::kBF16;
    switch (op) {
      case ReduceOp::kSum:
      case ReduceOp::kAvg: return bf ? s.bf16_sum : s.fp16_sum;
      case ReduceOp::kMax: return bf ? s.bf16_max : s.fp16_max;
      case ReduceOp::kMin: return bf ? s.bf16_min : s.fp16_min;
    }
  }
  return builtin_op(op);
}

}  // namespace shardtune::dist
