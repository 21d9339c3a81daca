// Checkpoint reading by element ranges.
#include "checkpoint/checkpoint_reader.h"

#include <ATen/ops/empty.h>
#include <fmt/format.h>

#include <algorithm>
#include <filesystem>

#include "checkpoint/block_crc.h"
#include "checkpoint/crc32.h"
#include "checkpoint/h5_check.h"
#include "checkpoint/h5_dataset.h"
#include "checkpoint/h5_range.h"
#include "common/error.h"
#include "common/open_files.h"

namespace shardtune::checkpoint {

using common::ErrorKind;

CheckpointReader::CheckpointReader(const std::string& dir)
    : dir_(dir), manifest_(read_manifest(dir)), files_(common::open_file_share()) {
  // The manifest was validated whole: each tensor's slices tile it exactly.
  for (const ManifestSlice& s : manifest_.slices) index_[{s.kind, s.tensor}].push_back(s);
  for (auto& [key, slices] : index_)
    std::sort(slices.begin(), slices.end(), [](const Slice& a, const Slice& b) { return a.offset < b.offset; });
  fapl_ = unlocked_file_access();
}

std::vector<int64_t> CheckpointReader::shape(const std::string& tensor) const {
  auto it = manifest_.tensors.find(tensor);
  ST_CHECK(it != manifest_.tensors.end(), ErrorKind::kIo, "{} holds no tensor {}", dir_, tensor);
  return it->second.shape;
}

std::vector<std::string> CheckpointReader::tensor_names() const {
  std::vector<std::string> out;
  for (const auto& [name, t] : manifest_.tensors) out.push_back(name);
  return out;
}

hid_t CheckpointReader::file(const std::string& name) {
  // Files open on demand, at most a share of the process's limit at once (common/open_files.h): a
  // dataset opened from a file keeps it open until the dataset closes, whatever happens here.
  return files_
      .get(name,
           [&] {
             const std::string path = dir_ + "/" + name;
             ST_CHECK(std::filesystem::exists(path), ErrorKind::kIo, "{}: file {} listed in the manifest is missing",
                      dir_, name);
             return open_checkpoint_file(path, fapl_.get());
           })
      .get();
}

void CheckpointReader::check_size(const std::string& kind, const std::string& tensor, const Slice& s, hid_t dataset) const {
  const int64_t stored = dataset_numel(dataset);
  ST_CHECK(stored >= s.dataset_offset + s.length, ErrorKind::kIo,
           "{}/{}: {} of {} (elements {}..{}): the dataset holds {} elements, too few for elements {}..{} of it", dir_,
           s.file, kind, tensor, s.offset, s.offset + s.length, stored, s.dataset_offset, s.dataset_offset + s.length);
}

void CheckpointReader::read_blocks(const std::string& kind, const std::string& tensor, const Slice& s, hid_t dataset,
                                   int64_t lo, int64_t hi, float* dst) {
  read_flat_range(dataset, s.dataset_offset + lo, hi - lo, dst);
  bytes_read_ += static_cast<uint64_t>(hi - lo) * 4;
  for (int64_t b = lo; b < hi; b += s.block) {
    const int64_t n = std::min(s.block, hi - b);
    ST_CHECK(crc32(dst + (b - lo), static_cast<size_t>(n) * sizeof(float)) == s.crcs[static_cast<size_t>(b / s.block)],
             ErrorKind::kIo, "{}/{}: {} of {} (elements {}..{}) fails its checksum: the file is corrupt", dir_, s.file,
             kind, tensor, s.offset + b, s.offset + b + n);
  }
}

void CheckpointReader::read_range(const std::string& kind, const std::string& tensor, int64_t offset, int64_t count,
                                  float* dst) {
  auto it = index_.find({kind, tensor});
  ST_CHECK(it != index_.end(), ErrorKind::kIo, "{} holds no {} of {}", dir_, kind, tensor);
  int64_t covered = 0;
  for (const Slice& s : it->second) {
    const int64_t lo = std::max(s.offset, offset) - s.offset, hi = std::min(s.offset + s.length, offset + count) - s.offset;
    if (lo >= hi) continue;
    H5Handle ds = open_checked_dataset(file(s.file), kind, s.dataset);
    check_size(kind, tensor, s, ds.get());
    // The blocks wholly inside the range are read in one request straight into place; a block at
    // either edge that sticks out goes through a buffer of one block.
    auto out = [&](int64_t i) { return dst + (s.offset + i - offset); };  // where slice element i >= lo lands
    const int64_t inner_lo = (lo + s.block - 1) / s.block * s.block;
    const int64_t inner_hi = hi == s.length ? hi : hi / s.block * s.block;
    if (inner_lo < inner_hi) read_blocks(kind, tensor, s, ds.get(), inner_lo, inner_hi, out(inner_lo));
    for (const bool upper : {false, true}) {
      const int64_t b_lo = (upper ? hi - 1 : lo) / s.block * s.block, b_hi = std::min(b_lo + s.block, s.length);
      const bool inner = b_lo >= inner_lo && b_hi <= std::max(inner_lo, inner_hi);
      if (inner || (upper && b_lo <= lo)) continue;  // read above, or the same block as lo's
      buffer_.resize(static_cast<size_t>(b_hi - b_lo));
      read_blocks(kind, tensor, s, ds.get(), b_lo, b_hi, buffer_.data());
      const int64_t from = std::max(lo, b_lo), to = std::min(hi, b_hi);
      std::copy(buffer_.begin() + (from - b_lo), buffer_.begin() + (to - b_lo), out(from));
    }
    covered += hi - lo;
  }
  ST_CHECK(covered == count, ErrorKind::kIo, "{} does not hold all of {} for {} (elements {}..{})", dir_, kind, tensor,
           offset, offset + count);
}

void CheckpointReader::read_ahead(const std::vector<std::pair<std::string, std::string>>& order) {
  ahead_.reset();
  ahead_ranges_.clear();
  std::vector<common::ReadAhead::Range> ranges;
  for (const auto& [kind, tensor] : order) {
    auto it = index_.find({kind, tensor});
    if (it == index_.end()) continue;
    for (const Slice& s : it->second) {
      if (s.length == 0) continue;
      const H5Handle ds = open_checked_dataset(file(s.file), kind, s.dataset);
      const std::optional<int64_t> at = raw_float32_offset(ds.get(), s.dataset_offset, s.length);
      if (!at) continue;  // read through HDF5; a dataset of the wrong size is reported by the stream
      ahead_ranges_[{kind, tensor, s.offset}] = ranges.size();
      ranges.push_back({dir_ + "/" + s.file, *at, s.length * static_cast<int64_t>(sizeof(float))});
    }
  }
  if (!ranges.empty()) ahead_ = std::make_unique<common::ReadAhead>(std::move(ranges));
}

at::Tensor CheckpointReader::read_tensor(const std::string& kind, const std::string& tensor) {
  at::Tensor t = at::empty(kind_shape(kind, {shape(tensor), "F32"}, manifest_.state_block), at::kFloat);
  read_range(kind, tensor, 0, t.numel(), t.data_ptr<float>());
  return t;
}

CheckpointReader::Stream CheckpointReader::stream(const std::string& kind, const std::string& tensor) {
  auto it = index_.find({kind, tensor});
  ST_CHECK(it != index_.end(), ErrorKind::kIo, "{} holds no {} of {}", dir_, kind, tensor);
  const int64_t numel = kind_numel(kind, {shape(tensor), "F32"}, manifest_.state_block);
  return Stream(*this, kind, tensor, it->second, numel);
}

CheckpointReader::Stream::Stream(CheckpointReader& reader, std::string kind, std::string tensor,
                                 const std::vector<Slice>& slices, int64_t numel)
    : reader_(reader), kind_(std::move(kind)), tensor_(std::move(tensor)), slices_(slices), numel_(numel) {}

int64_t CheckpointReader::Stream::read(float* dst, int64_t max) {
  const std::span<const float> got = next(max);
  std::copy(got.begin(), got.end(), dst);
  return static_cast<int64_t>(got.size());
}

std::span<const float> CheckpointReader::Stream::next(int64_t max) {
  while (slice_ < slices_.size() && slices_[slice_].length == 0) ++slice_;
  if (done_ == numel_ || max <= 0) return {};
  ST_CHECK(slice_ < slices_.size() && slices_[slice_].offset + in_slice_ == done_, ErrorKind::kIo,
           "{} does not hold all of {} for {}: nothing holds element {}", reader_.dir_, kind_, tensor_, done_);
  const Slice& s = slices_[slice_];
  if (in_slice_ == 0) {
    dataset_ = open_checked_dataset(reader_.file(s.file), kind_, s.dataset);
    reader_.check_size(kind_, tensor_, s, dataset_.get());
    crc_ = 0;
    const auto ahead = reader_.ahead_ranges_.find({kind_, tensor_, s.offset});
    range_ = ahead == reader_.ahead_ranges_.end() ? kNoRange : ahead->second;
  }
  const int64_t block = in_slice_ / s.block, block_end = std::min((block + 1) * s.block, s.length);
  int64_t n = std::min({max, block_end - in_slice_, numel_ - done_});
  const float* data = nullptr;
  if (range_ != kNoRange) {
    const common::ReadAhead::Piece piece = reader_.ahead_->next(range_, static_cast<size_t>(n) * sizeof(float));
    ST_CHECK(piece.bytes % sizeof(float) == 0, ErrorKind::kInternal, "read-ahead piece of {} bytes", piece.bytes);
    if (piece.bytes > 0) {
      n = static_cast<int64_t>(piece.bytes / sizeof(float));
      data = reinterpret_cast<const float*>(piece.data);
      reader_.bytes_read_ahead_ += piece.bytes;
    } else {
      range_ = kNoRange;  // streamed out of the declared order: the read-ahead has passed it by
    }
  }
  if (data == nullptr) {
    reader_.buffer_.resize(static_cast<size_t>(n));
    read_flat_range(dataset_.get(), s.dataset_offset + in_slice_, n, reader_.buffer_.data());
    data = reader_.buffer_.data();
  }
  crc_ = crc32(data, static_cast<size_t>(n) * sizeof(float), crc_);
  reader_.bytes_read_ += static_cast<uint64_t>(n) * 4;
  in_slice_ += n;
  done_ += n;
  if (in_slice_ == block_end) {
    ST_CHECK(crc_ == s.crcs[static_cast<size_t>(block)], ErrorKind::kIo,
             "{}/{}: {} of {} (elements {}..{}) fails its checksum: the file is corrupt", reader_.dir_, s.file, kind_,
             tensor_, s.offset + block * s.block, s.offset + block_end);
    crc_ = 0;
  }
  if (in_slice_ == s.length) {
    dataset_ = H5Handle();
    in_slice_ = 0;
    range_ = kNoRange;
    ++slice_;
  }
  return {data, static_cast<size_t>(n)};
}

}  // namespace shardtune::checkpoint
