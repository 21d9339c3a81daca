// The element types a safetensors file can declare, with their header spelling and byte size.
// Kept free of LibTorch so the header parser (and its fuzz target) build without it.
#pragma once

#include <cstddef>
#include <optional>
#include <string_view>

namespace shardtune::checkpoint {

enum class StDtype { kF64, kF32, kF16, kBF16, kI64, kI32, kI16, kI8, kU8, kBool, kF8E4M3, kF8E5M2 };

// The "dtype" strings of the Hugging Face reference implementation; std::nullopt for any other
// (the reader turns that into an error naming the file and tensor).
constexpr std::optional<StDtype> parse_st_dtype(std::string_view s) {
  if (s == "F64") return StDtype::kF64;
  if (s == "F32") return StDtype::kF32;
  if (s == "F16") return StDtype::kF16;
  if (s == "BF16") return StDtype::kBF16;
  if (s == "I64") return StDtype::kI64;
  if (s == "I32") return StDtype::kI32;
  if (s == "I16") return StDtype::kI16;
  if (s == "I8") return StDtype::kI8;
  if (s == "U8") return StDtype::kU8;
  if (s == "BOOL") return StDtype::kBool;
  if (s == "F8_E4M3") return StDtype::kF8E4M3;
  if (s == "F8_E5M2") return StDtype::kF8E5M2;
  return std::nullopt;
}

constexpr std::string_view to_string(StDtype d) {
  switch (d) {
    case StDtype::kF64: return "F64";
    case StDtype::kF32: return "F32";
    case StDtype::kF16: return "F16";
    case StDtype::kBF16: return "BF16";
    case StDtype::kI64: return "I64";
    case StDtype::kI32: return "I32";
    case StDtype::kI16: return "I16";
    case StDtype::kI8: return "I8";
    case StDtype::kU8: return "U8";
    case StDtype::kBool: return "BOOL";
    case StDtype::kF8E4M3: return "F8_E4M3";
    case StDtype::kF8E5M2: return "F8_E5M2";
  }
  return "?";
}

// Bytes per element. BOOL is one byte per element (0 or 1), as in PyTorch and NumPy.
constexpr std::size_t st_dtype_size(StDtype d) {
  switch (d) {
    case StDtype::kF64:
    case StDtype::kI64: return 8;
    case StDtype::kF32:
    case StDtype::kI32: return 4;
    case StDtype::kF16:
    case StDtype::kBF16:
    case StDtype::kI16: return 2;
    case StDtype::kI8:
    case StDtype::kU8:
    case StDtype::kBool:
    case StDtype::kF8E4M3:
    case StDtype::kF8E5M2: return 1;
  }
  return 0;
}

// Weights of these dtypes can be trained; integer and 8-bit ones (quantized checkpoints) cannot.
constexpr bool is_trainable_dtype(StDtype t) {
  return t == StDtype::kF32 || t == StDtype::kF16 || t == StDtype::kBF16 || t == StDtype::kF64;
}

}  // namespace shardtune::checkpoint
