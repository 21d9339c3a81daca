// The one element-type enum: what a safetensors file declares, what a collective moves, what a
// job asks gradients to be reduced in. Free of LibTorch, so the header parser, its fuzz target
// and the NCCL layer build without it (dist::dtype_of and checkpoint/hf/safetensors_torch.h
// bridge it to at::ScalarType).
#pragma once

#include <cstddef>
#include <optional>
#include <string_view>

namespace shardtune::common {

enum class Dtype { kF64, kF32, kF16, kBF16, kI64, kI32, kI16, kI8, kU8, kBool, kF8E4M3, kF8E5M2 };

// Bytes per element. BOOL is one byte per element (0 or 1), as in PyTorch and NumPy.
constexpr std::size_t element_size(Dtype d) {
  switch (d) {
    case Dtype::kF64:
    case Dtype::kI64: return 8;
    case Dtype::kF32:
    case Dtype::kI32: return 4;
    case Dtype::kF16:
    case Dtype::kBF16:
    case Dtype::kI16: return 2;
    case Dtype::kI8:
    case Dtype::kU8:
    case Dtype::kBool:
    case Dtype::kF8E4M3:
    case Dtype::kF8E5M2: return 1;
  }
  return 0;
}

// The floating types that can be trained, averaged and accumulated: F64, F32, F16 and BF16 (not
// the 8-bit ones of quantized checkpoints).
constexpr bool is_floating(Dtype d) {
  return d == Dtype::kF64 || d == Dtype::kF32 || d == Dtype::kF16 || d == Dtype::kBF16;
}

// The "dtype" strings of safetensors headers, as the Hugging Face reference spells them.
constexpr std::string_view safetensors_name(Dtype d) {
  switch (d) {
    case Dtype::kF64: return "F64";
    case Dtype::kF32: return "F32";
    case Dtype::kF16: return "F16";
    case Dtype::kBF16: return "BF16";
    case Dtype::kI64: return "I64";
    case Dtype::kI32: return "I32";
    case Dtype::kI16: return "I16";
    case Dtype::kI8: return "I8";
    case Dtype::kU8: return "U8";
    case Dtype::kBool: return "BOOL";
    case Dtype::kF8E4M3: return "F8_E4M3";
    case Dtype::kF8E5M2: return "F8_E5M2";
  }
  return "?";
}

// std::nullopt for any string safetensors does not define (the reader names the file and tensor).
constexpr std::optional<Dtype> parse_safetensors_name(std::string_view s) {
  for (const Dtype d : {Dtype::kF64, Dtype::kF32, Dtype::kF16, Dtype::kBF16, Dtype::kI64, Dtype::kI32, Dtype::kI16,
                        Dtype::kI8, Dtype::kU8, Dtype::kBool, Dtype::kF8E4M3, Dtype::kF8E5M2})
    if (s == safetensors_name(d)) return d;
  return std::nullopt;
}

// Short names for messages and job files: "fp32", "bf16", "int64", ...
constexpr std::string_view short_name(Dtype d) {
  switch (d) {
    case Dtype::kF64: return "fp64";
    case Dtype::kF32: return "fp32";
    case Dtype::kF16: return "fp16";
    case Dtype::kBF16: return "bf16";
    case Dtype::kI64: return "int64";
    case Dtype::kI32: return "int32";
    case Dtype::kI16: return "int16";
    case Dtype::kI8: return "int8";
    case Dtype::kU8: return "uint8";
    case Dtype::kBool: return "bool";
    case Dtype::kF8E4M3: return "fp8_e4m3";
    case Dtype::kF8E5M2: return "fp8_e5m2";
  }
  return "?";
}

}  // namespace shardtune::common
