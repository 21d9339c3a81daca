// Validation of a safetensors header (the 8-byte length and the JSON that follows), on bytes in
// memory: SafetensorsFile runs it on its mapping, the fuzz target on arbitrary input.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "common/dtype.h"

namespace shardtune::checkpoint {

// One tensor of a safetensors file, after validation.
struct TensorInfo {
  std::string name;
  common::Dtype dtype;
  std::vector<int64_t> shape;  // () for a scalar; a 0 anywhere for an empty tensor
  uint64_t data_begin;         // absolute offset of the first byte in the file
  uint64_t nbytes;             // numel × common::element_size(dtype)
};

struct ParsedHeader {
  uint64_t header_size = 0;  // N, the JSON length declared in the first 8 bytes (padding included)
  uint64_t data_begin = 0;   // 8 + N: where the data area starts in the file
  std::vector<TensorInfo> tensors;  // sorted by data_begin (then by name, for empty tensors)
  std::map<std::string, std::string> metadata;  // "__metadata__", empty when absent
};

// The longest header accepted. The reference implementation uses the same bound: a real header
// is a few hundred bytes per tensor, so anything larger is a corrupt length field, not a model.
inline constexpr uint64_t kMaxSafetensorsHeaderBytes = 100'000'000;

// Validates the header of a whole file given as `file_bytes` (only the first 8 + N bytes are
// read; the size of the span is what tensor ranges are checked against) and throws
// common::Error(kIo) naming `name_for_errors`, the tensor and the offsets on the first problem.
// The tensors must tile the data area exactly: no overlap, no gap, no trailing bytes.
ParsedHeader parse_safetensors_header(std::span<const std::byte> file_bytes,
                                      const std::string& name_for_errors);

}  // namespace shardtune::checkpoint
