// Flat element ranges of HDF5 datasets: elements [offset, offset + count) of a dataset in
// row-major order, whatever its shape, read or written as float32 without touching the rest. The
// streaming tools work through these in bounded pieces.
#pragma once

#include <hdf5.h>

#include <cstdint>

namespace shardtune::checkpoint {

// Number of elements of the dataset.
int64_t dataset_numel(hid_t dataset);

void read_flat_range(hid_t dataset, int64_t offset, int64_t count, float* dst);
void write_flat_range(hid_t dataset, int64_t offset, int64_t count, const float* src);

}  // namespace shardtune::checkpoint
