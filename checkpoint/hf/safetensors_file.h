// A safetensors file opened for reading: mapped read-only, header validated before any tensor
// byte is used, tensors read one at a time without reading or allocating the rest of the file.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/dtype.h"
#include "checkpoint/hf/safetensors_header.h"

namespace shardtune::checkpoint {

class SafetensorsFile {
 public:
  // Maps `path` and validates its header (see parse_safetensors_header); throws common::Error(kIo)
  // naming the path on any problem.
  static SafetensorsFile open(const std::string& path);

  SafetensorsFile(SafetensorsFile&& other) noexcept;
  SafetensorsFile& operator=(SafetensorsFile&& other) noexcept;
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;
  ~SafetensorsFile();

  const std::string& path() const { return path_; }
  uint64_t file_size() const { return size_; }

  // Sorted by data_begin.
  const std::vector<TensorInfo>& tensors() const { return header_.tensors; }
  // nullptr when the file has no tensor of that name.
  const TensorInfo* find(std::string_view name) const;
  // Throws common::Error(kIo) naming the file and the tensor when it is not in the file.
  const TensorInfo& at(std::string_view name) const;
  const std::map<std::string, std::string>& metadata() const { return header_.metadata; }

  // The tensor's bytes inside the mapping. Only the pages the caller touches are read from disk;
  // the view lives as long as this object.
  std::span<const std::byte> bytes(const TensorInfo& tensor) const;
  // Copies bytes [offset, offset + length) of one tensor to `dst`; throws common::Error(kIo)
  // naming the file, the tensor and both ranges when the range is not inside the tensor.
  void read_bytes(const TensorInfo& tensor, uint64_t offset, uint64_t length, void* dst) const;

 private:
  SafetensorsFile(std::string path, const std::byte* base, uint64_t size);
  void check_owned(const TensorInfo& tensor) const;
  void unmap() noexcept;

  std::string path_;
  const std::byte* base_ = nullptr;  // the read-only mapping of the whole file
  uint64_t size_ = 0;
  int guard_ = -1;  // common/mapping_guard.h
  ParsedHeader header_;
  std::map<std::string, size_t, std::less<>> index_;  // name -> position in header_.tensors
};

}  // namespace shardtune::checkpoint
