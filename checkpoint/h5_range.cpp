// A flat range of an N-dimensional dataspace is a union of at most 2 x rank hyperslabs: a partial
// leading block, whole blocks, a partial trailing block, recursively.
#include "checkpoint/h5_range.h"

#include <vector>

#include "checkpoint/h5_check.h"
#include "checkpoint/h5_handle.h"
#include "common/error.h"

namespace shardtune::checkpoint {
namespace {

struct Selector {
  hid_t space;
  std::vector<hsize_t> dims;
  bool first = true;

  void add(std::vector<hsize_t> start, std::vector<hsize_t> count) {
    ST_H5_CHECK(H5Sselect_hyperslab(space, first ? H5S_SELECT_SET : H5S_SELECT_OR, start.data(), nullptr,
                                    count.data(), nullptr));
    first = false;
  }

  // Elements [offset, offset + count) of the block whose leading indices are `prefix`.
  void range(std::vector<hsize_t> prefix, hsize_t offset, hsize_t count) {
    if (count == 0) return;
    const size_t d = prefix.size();
    hsize_t stride = 1;  // elements per index of dimension d
    for (size_t i = d + 1; i < dims.size(); ++i) stride *= dims[i];
    auto block = [&](hsize_t index, hsize_t n) {  // n whole blocks from `index` on
      std::vector<hsize_t> start = prefix, extent(prefix.size(), 1);
      start.push_back(index);
      extent.push_back(n);
      for (size_t i = d + 1; i < dims.size(); ++i) {
        start.push_back(0);
        extent.push_back(dims[i]);
      }
      add(start, extent);
    };
    hsize_t index = offset / stride;
    if (const hsize_t into = offset % stride; into != 0 || count < stride) {  // a partial block first
      const hsize_t n = std::min(count, stride - into);
      std::vector<hsize_t> inner = prefix;
      inner.push_back(index++);
      range(inner, into, n);
      count -= n;
    }
    if (count >= stride) {
      block(index, count / stride);
      index += count / stride;
      count %= stride;
    }
    if (count > 0) {
      std::vector<hsize_t> inner = prefix;
      inner.push_back(index);
      range(inner, 0, count);
    }
  }
};

// The file dataspace of `dataset` with [offset, offset + count) selected.
H5Handle select(hid_t dataset, int64_t offset, int64_t count) {
  H5Handle space(ST_H5_CHECK(H5Dget_space(dataset)), H5Sclose);
  const int rank = ST_H5_CHECK(H5Sget_simple_extent_ndims(space.get()));
  Selector s{space.get(), std::vector<hsize_t>(static_cast<size_t>(rank))};
  ST_H5_CHECK(H5Sget_simple_extent_dims(space.get(), s.dims.data(), nullptr));
  const int64_t numel = ST_H5_CHECK(H5Sget_simple_extent_npoints(space.get()));
  ST_CHECK(offset >= 0 && count >= 0 && offset + count <= numel, common::ErrorKind::kInternal,
           "elements [{}, {}) of a dataset of {}", offset, offset + count, numel);
  if (rank == 0 || count == 0) {
    ST_H5_CHECK(count == 0 ? H5Sselect_none(space.get()) : H5Sselect_all(space.get()));
  } else {
    s.range({}, static_cast<hsize_t>(offset), static_cast<hsize_t>(count));
  }
  return space;
}

H5Handle memory_space(int64_t count) {
  const hsize_t dims[1] = {static_cast<hsize_t>(count)};
  return H5Handle(ST_H5_CHECK(H5Screate_simple(1, dims, nullptr)), H5Sclose);
}

}  // namespace

int64_t dataset_numel(hid_t dataset) {
  H5Handle space(ST_H5_CHECK(H5Dget_space(dataset)), H5Sclose);
  return ST_H5_CHECK(H5Sget_simple_extent_npoints(space.get()));
}

std::optional<int64_t> raw_float32_offset(hid_t dataset, int64_t first, int64_t count) {
  const int64_t numel = dataset_numel(dataset);
  if (count <= 0 || first < 0 || first + count > numel) return std::nullopt;
  const H5Handle plist(H5Dget_create_plist(dataset), H5Pclose);
  const H5Handle type(H5Dget_type(dataset), H5Tclose);
  const bool raw = plist.get() >= 0 && H5Pget_layout(plist.get()) == H5D_CONTIGUOUS && H5Pget_external_count(plist.get()) == 0 &&
                   type.get() >= 0 && H5Tequal(type.get(), H5T_IEEE_F32LE) > 0 &&
                   H5Dget_storage_size(dataset) == static_cast<hsize_t>(numel) * sizeof(float);
  const haddr_t at = raw ? H5Dget_offset(dataset) : HADDR_UNDEF;
  take_hdf5_error_stack();  // what a refused probe left there
  if (at == HADDR_UNDEF || at % sizeof(float) != 0) return std::nullopt;
  return static_cast<int64_t>(at) + first * static_cast<int64_t>(sizeof(float));
}

void read_flat_range(hid_t dataset, int64_t offset, int64_t count, float* dst) {
  if (count == 0) return;
  H5Handle file_space = select(dataset, offset, count), mem = memory_space(count);
  ST_H5_CHECK(H5Dread(dataset, H5T_NATIVE_FLOAT, mem.get(), file_space.get(), H5P_DEFAULT, dst));
}

void write_flat_range(hid_t dataset, int64_t offset, int64_t count, const float* src) {
  if (count == 0) return;
  H5Handle file_space = select(dataset, offset, count), mem = memory_space(count);
  ST_H5_CHECK(H5Dwrite(dataset, H5T_NATIVE_FLOAT, mem.get(), file_space.get(), H5P_DEFAULT, src));
}

}  // namespace shardtune::checkpoint
