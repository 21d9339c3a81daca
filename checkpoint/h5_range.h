// Flat element ranges of HDF5 datasets: elements [offset, offset + count) of a dataset in
// row-major order, whatever its shape, read or written as float32 without touching the rest. The
// streaming tools work through these in bounded pieces.
#pragma once

#include <hdf5.h>

#include <cstdint>
#include <optional>

namespace shardtune::checkpoint {

// Number of elements of the dataset.
int64_t dataset_numel(hid_t dataset);

// Where element `first` of a dataset lies in its file, if elements [first, first + count) lie there
// as shardtune writes them: contiguous little-endian float32, all of them allocated, at an offset a
// float may start at; else nothing (HDF5 must then read them, or report the dataset too short).
std::optional<int64_t> raw_float32_offset(hid_t dataset, int64_t first, int64_t count);

void read_flat_range(hid_t dataset, int64_t offset, int64_t count, float* dst);
void write_flat_range(hid_t dataset, int64_t offset, int64_t count, const float* src);

}  // namespace shardtune::checkpoint
