// Streaming digests of a model's weights.
#include "checkpoint/hf/weights_digest.h"

#include <c10/core/ScalarType.h>
#include <fmt/format.h>

#include <chrono>

#include "common/aligned_vector.h"
#include "common/error.h"
#include "runtime/model/llama_config.h"

namespace shardtune::checkpoint {

using common::ErrorKind;

std::vector<std::string> identity_tensors(const HfFolder& folder) {
  const bool tied = folder.config().value("tie_word_embeddings", false);
  std::vector<std::string> out;
  for (const std::string& name : folder.tensor_names())
    if (!(tied && name == "lm_head.weight") && !model::is_ignored_checkpoint_tensor(name)) out.push_back(name);
  return out;
}

WeightsDigest::WeightsDigest(const HfFolder& folder) {
  for (const std::string& name : identity_tensors(folder)) tensors_[name].size = folder.info(name).nbytes;
}

void WeightsDigest::add(const std::string& name, uint64_t offset, const void* data, uint64_t size) {
  auto it = tensors_.find(name);
  if (it == tensors_.end()) return;
  Tensor& t = it->second;
  ST_CHECK(offset == t.done && offset + size <= t.size, ErrorKind::kInternal,
           "weights digest: bytes {}..{} of {} arrived after {} of its {} bytes", offset, offset + size, name, t.done,
           t.size);
  const auto start = std::chrono::steady_clock::now();
  t.sha.update(data, size);
  t.done += size;
  seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

void WeightsDigest::complete(const HfFolder& folder) {
  common::AlignedVector<std::byte> buffer;
  for (auto& [name, t] : tensors_) {
    while (t.done < t.size) {
      const uint64_t n = std::min<uint64_t>(t.size - t.done, uint64_t{16} << 20);
      buffer.resize(n);
      folder.file_of(name).read_bytes(folder.info(name), t.done, n, buffer.data());
      add(name, t.done, buffer.data(), n);
    }
  }
}

std::string WeightsDigest::hex() {
  std::string lines;
  for (auto& [name, t] : tensors_) {
    ST_CHECK(t.done == t.size, ErrorKind::kInternal, "weights digest: {} was read to byte {} of {}", name, t.done,
             t.size);
    lines += fmt::format("{} {}\n", name, t.sha.hex());
  }
  return common::sha256_hex(lines);
}

namespace {

class DigestingSource final : public fsdp::TensorSource {
 public:
  DigestingSource(std::unique_ptr<fsdp::TensorSource> inner, WeightsDigest& digest)
      : inner_(std::move(inner)), digest_(digest) {
    for (const fsdp::SourceTensor& t : inner_->tensors())
      if (t.trainable) stored_[t.name] = *t.trainable;
  }
  std::vector<fsdp::SourceTensor> tensors() const override { return inner_->tensors(); }
  void read(const std::string& name, int64_t offset, int64_t count, at::ScalarType dtype, void* dst) override {
    inner_->read(name, offset, count, dtype, dst);
    pass_on(name, offset, count, dtype, dst);
  }
  std::vector<std::string> storage_order() const override { return inner_->storage_order(); }
  void read_batch(std::vector<fsdp::ReadRequest> requests) override {
    inner_->read_batch(requests);
    for (const fsdp::ReadRequest& r : requests) pass_on(*r.name, r.offset, r.count, r.dtype, r.dst);
  }
  void prefetch(const std::vector<fsdp::ReadRequest>& requests) override { inner_->prefetch(requests); }
  std::string location(const std::string& name) const override { return inner_->location(name); }
  uint64_t bytes_read() const override { return inner_->bytes_read(); }
  // NF4 records are regrouped bytes of several tensors: WeightsDigest::complete hashes those.
  std::map<std::string, fsdp::Nf4Stored> nf4_weights() const override { return inner_->nf4_weights(); }
  void read_nf4_records(const std::string& name, int64_t first, int64_t count, uint8_t* out) override {
    inner_->read_nf4_records(name, first, count, out);
  }
  bool nf4_storage(const std::string& name) const override { return inner_->nf4_storage(name); }

 private:
  void pass_on(const std::string& name, int64_t offset, int64_t count, at::ScalarType dtype, const void* dst) {
    const auto it = stored_.find(name);
    ST_CHECK(it != stored_.end() && it->second == dtype, ErrorKind::kInternal,
             "weights digest: {} was read converted, not as stored", name);
    const uint64_t element = c10::elementSize(dtype);
    digest_.add(name, static_cast<uint64_t>(offset) * element, dst, static_cast<uint64_t>(count) * element);
  }

  std::unique_ptr<fsdp::TensorSource> inner_;
  WeightsDigest& digest_;
  std::map<std::string, at::ScalarType> stored_;
};

}  // namespace

std::unique_ptr<fsdp::TensorSource> digesting_source(std::unique_ptr<fsdp::TensorSource> inner, WeightsDigest& digest) {
  return std::make_unique<DigestingSource>(std::move(inner), digest);
}

}  // namespace shardtune::checkpoint
