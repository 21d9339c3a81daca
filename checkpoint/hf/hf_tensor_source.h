// A Hugging Face safetensors folder as the loader's TensorSource (runtime/fsdp/tensor_source.h). Ranges are read with pread into the
// destination (or a bounded conversion buffer), so the page cache, not this process, holds the
// file data: the reader's memory does not grow with the model.
#pragma once

#include <map>
#include <memory>

#include "checkpoint/hf/bnb_nf4.h"
#include "checkpoint/hf/hf_folder.h"
#include "common/aligned_vector.h"
#include "runtime/fsdp/tensor_source.h"

namespace shardtune::checkpoint {

class HfTensorSource final : public fsdp::TensorSource {
 public:
  explicit HfTensorSource(const std::string& dir);
  ~HfTensorSource() override;

  const HfFolder& folder() const { return folder_; }
  std::vector<fsdp::SourceTensor> tensors() const override;
  void read(const std::string& name, int64_t offset, int64_t count, at::ScalarType dtype, void* dst) override;
  std::vector<std::string> storage_order() const override;  // by file, then offset
  // Sorted by file and offset; runs of ranges that lie end to end in a file and need no
  // conversion are read by one preadv each.
  void read_batch(std::vector<fsdp::ReadRequest> requests) override;
  // Asks the kernel to start reading the ranges into the page cache (POSIX_FADV_WILLNEED).
  void prefetch(const std::vector<fsdp::ReadRequest>& requests) override;
  uint64_t bytes_read() const override { return bytes_read_; }
  std::string location(const std::string& name) const override { return folder_.file_of(name).path(); }
  // A bitsandbytes 4-bit folder's weights (checkpoint/hf/bnb_nf4.h), checked when it is opened.
  std::map<std::string, fsdp::Nf4Stored> nf4_weights() const override;
  void read_nf4_records(const std::string& name, int64_t first, int64_t count, uint8_t* out) override;
  bool nf4_storage(const std::string& name) const override;

 private:
  int fd_of(const std::string& path);
  void pread_exactly(int fd, const std::string& path, uint64_t offset, uint64_t length, void* dst);

  HfFolder folder_;
  std::map<std::string, BnbNf4Weight> nf4_;
  std::map<std::string, int> fds_;
  common::AlignedVector<char> chunk_;  // conversion buffer, kept: a fresh one per read costs page faults
  uint64_t bytes_read_ = 0;
};

// Opens an HfTensorSource on the folder when called (on the ranks that read).
struct HfFolderSourceFactory {
  std::string dir;
  std::unique_ptr<fsdp::TensorSource> operator()() const { return std::make_unique<HfTensorSource>(dir); }
};

}  // namespace shardtune::checkpoint
