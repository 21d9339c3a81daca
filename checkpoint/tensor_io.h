// Checkpoint data in and out of tensors of any device and floating dtype, as float32, through a
// host buffer of bounded size: a GPU shard of any size (a 70B model's embedding slice is
// gigabytes) is saved and loaded with at most `stage_elements` floats of pinned host memory, and
// an fp32 shard on the host goes straight to and from the file.
#pragma once

#include <ATen/core/Tensor.h>
#include <hdf5.h>

#include <cstdint>
#include <functional>
#include <vector>

#include "checkpoint/block_crc.h"

namespace shardtune::checkpoint {

// Two checksum blocks (32 MiB of float32).
inline constexpr int64_t kStageElements = 2 * kCrcBlock;

// Writes the 1-D tensor `src` into elements [0, numel) of `dataset` as float32 and returns its
// block checksums (kCrcBlock elements per block).
std::vector<uint32_t> write_tensor(hid_t dataset, const at::Tensor& src, int64_t stage_elements = kStageElements);

// Reads elements of float32 data into the 1-D tensor `dst`: `read(offset, count, out)` must fill
// `out` with elements [offset, offset + count) of the source.
using FloatReader = std::function<void(int64_t offset, int64_t count, float* out)>;
void read_tensor(const at::Tensor& dst, const FloatReader& read, int64_t stage_elements = kStageElements);

}  // namespace shardtune::checkpoint
