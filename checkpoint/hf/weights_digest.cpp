// Streaming digests of a model's weights.
#include "checkpoint/hf/weights_digest.h"

#include <c10/core/ScalarType.h>
#include <fmt/format.h>

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <sstream>

#include "common/aligned_vector.h"
#include "common/error.h"
#include "runtime/dist/agree.h"
#include "runtime/dist/text_collectives.h"
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

WeightsDigest::WeightsDigest(const HfFolder& folder, uint64_t chunk_bytes) : chunk_(chunk_bytes) {
  ST_CHECK(chunk_ > 0, ErrorKind::kInternal, "weights digest in chunks of 0 bytes");
  for (const std::string& name : identity_tensors(folder)) {
    Tensor& t = tensors_[name];
    t.size = folder.info(name).nbytes;
    t.chunks.resize(chunk_count(t));
  }
}

void WeightsDigest::add(const std::string& name, uint64_t offset, const void* data, uint64_t size) {
  auto it = tensors_.find(name);
  if (it == tensors_.end()) return;
  Tensor& t = it->second;
  ST_CHECK(offset + size <= t.size, ErrorKind::kInternal, "weights digest: bytes {}..{} of {}, which has {}", offset,
           offset + size, name, t.size);
  const auto start = std::chrono::steady_clock::now();
  const auto* bytes = static_cast<const std::byte*>(data);
  for (uint64_t at = offset; at < offset + size;) {
    const uint64_t c = at / chunk_, chunk_begin = c * chunk_;
    const uint64_t chunk_end = std::min(t.size, chunk_begin + chunk_);
    const uint64_t n = std::min(chunk_end, offset + size) - at;
    if (t.chunks[c].empty()) {
      if (at == chunk_begin) t.partial.erase(c);  // a chunk read again from its start: hashed anew
      auto p = t.partial.find(c);
      if (p == t.partial.end() && at == chunk_begin) p = t.partial.emplace(c, Partial{}).first;
      if (p != t.partial.end() && chunk_begin + p->second.done == at) {
        p->second.sha.update(bytes + (at - offset), n);
        p->second.done += n;
        if (chunk_begin + p->second.done == chunk_end) {
          t.chunks[c] = p->second.sha.hex();
          t.partial.erase(p);
        }
      }
    }
    at += n;
  }
  seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

std::string WeightsDigest::chunks_text() const {
  std::string out;
  size_t index = 0;
  for (const auto& [name, t] : tensors_) {
    for (size_t c = 0; c < t.chunks.size(); ++c)
      if (!t.chunks[c].empty()) out += fmt::format("{} {} {}\n", index, c, t.chunks[c]);
    ++index;
  }
  return out;
}

void WeightsDigest::merge(const std::string& text) {
  std::vector<Tensor*> by_index;
  for (auto& [name, t] : tensors_) by_index.push_back(&t);
  std::istringstream in(text);
  size_t index = 0, c = 0;
  std::string hex;
  while (in >> index >> c >> hex) {
    ST_CHECK(index < by_index.size() && c < by_index[index]->chunks.size() && hex.size() == 64, ErrorKind::kInternal,
             "weights digest: a chunk record {} {} {} of another rank does not fit this folder", index, c, hex);
    Tensor& t = *by_index[index];
    ST_CHECK(t.chunks[c].empty() || t.chunks[c] == hex, ErrorKind::kInternal,
             "weights digest: two ranks read different bytes for chunk {} of tensor {}", c, index);
    t.chunks[c] = hex;
    t.partial.erase(c);
  }
}

uint64_t WeightsDigest::complete(const HfFolder& folder) {
  common::AlignedVector<std::byte> buffer;
  uint64_t read = 0;
  for (auto& [name, t] : tensors_) {
    for (uint64_t c = 0; c < t.chunks.size(); ++c) {
      if (!t.chunks[c].empty()) continue;
      const uint64_t begin = c * chunk_, n = std::min(t.size, begin + chunk_) - begin;
      buffer.resize(n);
      folder.file_of(name).read_bytes(folder.info(name), begin, n, buffer.data());
      add(name, begin, buffer.data(), n);
      read += n;
    }
  }
  return read;
}

std::string WeightsDigest::hex() const {
  std::string lines;
  for (const auto& [name, t] : tensors_) {
    std::string chunks;
    for (size_t c = 0; c < t.chunks.size(); ++c) {
      ST_CHECK(!t.chunks[c].empty(), ErrorKind::kInternal, "weights digest: bytes {}..{} of {} were not hashed",
               c * chunk_, std::min<uint64_t>(t.size, (c + 1) * chunk_), name);
      chunks += t.chunks[c] + "\n";
    }
    lines += fmt::format("{} {}\n", name, common::sha256_hex(chunks));
  }
  return common::sha256_hex(lines);
}

std::string merged_digest(WeightsDigest* mine, const HfFolder* folder_on_root, dist::Communicator& world,
                          uint64_t chunk_bytes) {
  const std::vector<std::string> all = dist::gather_text(world, mine != nullptr ? mine->chunks_text() : std::string());
  return dist::decide_on_root(world, [&] {
    ST_CHECK(folder_on_root != nullptr, ErrorKind::kInternal, "weights digest: world rank 0 has no model folder");
    WeightsDigest merged(*folder_on_root, chunk_bytes);
    for (const std::string& text : all) merged.merge(text);
    const auto start = std::chrono::steady_clock::now();
    const uint64_t read = merged.complete(*folder_on_root);
    if (read > 0)
      spdlog::info("base model identity: {:.2f} GB no reader saw as stored hashed by world rank 0 in {:.2f} s",
                   static_cast<double>(read) / 1e9,
                   std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    return merged.hex();
  }, "identifying the base model (merging the readers' digests)");
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
