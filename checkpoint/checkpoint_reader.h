// Reading any range of any tensor out of a committed checkpoint (sharded or full): the manifest
// says which slices hold it; every block read is checked against its CRC-32 (block_crc.h), and
// only the blocks a range overlaps are read. read_range buffers at most one block; a Stream reads
// a tensor front to back in pieces of at most the caller's size, so tools stay within bounded
// memory whatever the tensor.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "checkpoint/h5_handle.h"
#include "checkpoint/manifest.h"
#include "common/aligned_vector.h"
#include "common/lru_cache.h"
#include "common/read_ahead.h"

namespace shardtune::checkpoint {

class CheckpointReader {
 public:
  explicit CheckpointReader(const std::string& dir);

  const std::string& dir() const { return dir_; }
  const Manifest& manifest() const { return manifest_; }
  bool has(const std::string& kind, const std::string& tensor) const { return index_.count({kind, tensor}) > 0; }
  std::vector<int64_t> shape(const std::string& tensor) const;
  std::vector<std::string> tensor_names() const;  // sorted

  // Elements [offset, offset + count) of the flattened tensor, as float32, into dst. Throws
  // common::Error(kIo) naming the file, tensor and elements on a bad checksum or a gap.
  void read_range(const std::string& kind, const std::string& tensor, int64_t offset, int64_t count, float* dst);
  // The whole tensor in its shape (float32).
  at::Tensor read_tensor(const std::string& kind, const std::string& tensor);
  uint64_t bytes_read() const { return bytes_read_; }

  // Declares the (kind, tensor) pairs about to be streamed whole, in this order: their slices'
  // bytes are then read ahead on threads of their own, with O_DIRECT (common/read_ahead.h), and
  // their streams hand them out from there. A slice stored otherwise than as a contiguous
  // little-endian float32 dataset (not written by shardtune), and a tensor streamed out of this
  // order, are read through HDF5 as without it.
  void read_ahead(const std::vector<std::pair<std::string, std::string>>& order);
  size_t slices_read_ahead() const { return ahead_ranges_.size(); }  // of the last read_ahead()
  uint64_t bytes_read_ahead() const { return bytes_read_ahead_; }     // of bytes_read(), how many came so

  using Slice = ManifestSlice;
  static constexpr size_t kNoRange = static_cast<size_t>(-1);

  // One tensor, front to back. Each block's CRC-32 is checked as its last element is read; a gap
  // between slices, a dataset of the wrong size or a bad checksum throws common::Error(kIo) naming
  // the file and tensor (pieces of the block already returned must then be discarded).
  class Stream {
   public:
    // Up to `max` further elements into dst (never past the end of a checksum block); how many (0
    // once the tensor is done).
    int64_t read(float* dst, int64_t max);
    // The same elements without a copy: valid until the next read from this reader (any stream,
    // read_range, read_tensor).
    std::span<const float> next(int64_t max);

   private:
    friend class CheckpointReader;
    Stream(CheckpointReader& reader, std::string kind, std::string tensor, const std::vector<Slice>& slices, int64_t numel);
    CheckpointReader& reader_;
    std::string kind_, tensor_;
    const std::vector<Slice>& slices_;
    int64_t numel_;
    size_t slice_ = 0;
    int64_t done_ = 0;     // elements of the tensor returned so far
    int64_t in_slice_ = 0;  // of the current slice
    uint32_t crc_ = 0;      // of the current block so far
    H5Handle dataset_;
    size_t range_ = kNoRange;  // of the read-ahead, holding the current slice
  };
  Stream stream(const std::string& kind, const std::string& tensor);

 private:
  hid_t file(const std::string& name);
  // Throws common::Error(kIo) naming the slice unless `dataset` holds its elements.
  void check_size(const std::string& kind, const std::string& tensor, const Slice& s, hid_t dataset) const;
  // Slice elements [lo, hi), whole blocks, into dst, each block checked.
  void read_blocks(const std::string& kind, const std::string& tensor, const Slice& s, hid_t dataset, int64_t lo,
                   int64_t hi, float* dst);

  std::string dir_;
  Manifest manifest_;
  std::map<std::pair<std::string, std::string>, std::vector<Slice>> index_;
  H5Handle fapl_;
  common::LruCache<std::string, H5Handle> files_;  // open on demand (common/open_files.h)
  std::unique_ptr<common::ReadAhead> ahead_;
  std::map<std::tuple<std::string, std::string, int64_t>, size_t> ahead_ranges_;  // (kind, tensor, slice offset)
  common::AlignedVector<float> buffer_;  // aligned: reads into it copy fast (aligned_vector.h)
  uint64_t bytes_read_ = 0, bytes_read_ahead_ = 0;
};

}  // namespace shardtune::checkpoint
