// The bridge between safetensors files and LibTorch tensors: dtype mapping, reading one tensor
// into a fresh CPU tensor, and writing a file tensor by tensor.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/ScalarType.h>

#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/dtype.h"
#include "checkpoint/hf/safetensors_file.h"

namespace shardtune::checkpoint {

// Throws common::Error(kIo) for F8_E4M3 / F8_E5M2 when this LibTorch has no float8 (before 2.1).
at::ScalarType to_scalar_type(common::Dtype dtype);
// Throws common::Error(kIo) for scalar types safetensors cannot store (complex, quantized, ...).
common::Dtype to_st_dtype(at::ScalarType type);

// A freshly allocated, contiguous CPU tensor with the stored dtype and shape; the bytes are
// copied out of the mapping, so the result does not keep the file alive.
at::Tensor read_tensor(const SafetensorsFile& file, std::string_view name);

// Writes `tensors` (data in the given order) to `path`: first to `path + ".tmp"`, fsynced, then
// renamed over `path`, so a reader sees the old file or the complete new one. Each tensor is
// moved to the CPU and made contiguous on its own, so memory stays bounded by the largest tensor.
// "__metadata__" is written only when `metadata` is non-empty.
void write_safetensors(const std::string& path, const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

}  // namespace shardtune::checkpoint
