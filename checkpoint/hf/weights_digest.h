// The identity of a base model's weights: SHA-256 over every byte of every tensor as stored, taken
// as the bytes stream by for another reason (the loaders' reads, a merge's reads), never in a pass
// of its own. Each tensor's stored bytes are cut into chunks of 1 MiB (the last shorter); the
// tensor's digest is SHA-256 of its chunks' SHA-256 (hex, one a line), and the identity SHA-256 of
// one line "<name> <tensor digest>\n" per tensor, sorted by name. Chunks hash independently, so
// the readers of a job (one per node, each reading what its node holds) hash the chunks they read
// whole, and world rank 0 merges them (chunks_text, merge): no rank hashes the whole model.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "checkpoint/hf/hf_folder.h"
#include "common/sha256.h"
#include "runtime/dist/communicator.h"
#include "runtime/fsdp/tensor_source.h"

namespace shardtune::checkpoint {

class WeightsDigest {
 public:
  static constexpr uint64_t kChunkBytes = uint64_t{1} << 20;

  // Expects the identity tensors of `folder` (identity_tensors): the digest of a model's weights.
  // Another `chunk_bytes` gives another digest (tests cut small tensors into several chunks).
  explicit WeightsDigest(const HfFolder& folder, uint64_t chunk_bytes = kChunkBytes);

  // Bytes [offset, offset + size) of tensor `name`, ranges in any order. A chunk is hashed when
  // its bytes arrive whole, front to back (in one range or in ranges end to end); bytes of a chunk
  // whose start did not arrive here, and of a tensor the digest does not cover, are ignored.
  void add(const std::string& name, uint64_t offset, const void* data, uint64_t size);
  // The chunks hashed here, as text; merge() adds another digest's (of the same folder).
  std::string chunks_text() const;
  void merge(const std::string& chunks_text);
  // Reads and hashes every chunk not hashed yet, in a pass of its own (the storage of weights the
  // ranks read as NF4 records, which no reader sees as stored); returns the bytes it read.
  uint64_t complete(const HfFolder& folder);
  // The digest as hex. Throws common::Error(kInternal) naming a tensor with a chunk not hashed.
  std::string hex() const;
  double seconds() const { return seconds_; }  // spent hashing so far

 private:
  struct Partial {
    uint64_t done = 0;  // bytes of the chunk hashed
    common::Sha256 sha;
  };
  struct Tensor {
    uint64_t size = 0;
    std::vector<std::string> chunks;  // hex; empty until hashed
    std::map<uint64_t, Partial> partial;  // chunks begun, by index
  };
  uint64_t chunk_count(const Tensor& t) const { return (t.size + chunk_ - 1) / chunk_; }
  uint64_t chunk_;
  std::map<std::string, Tensor> tensors_;
  double seconds_ = 0;
};

// Collective over `world`: the digest of the ranks' `mine` (those that read, each what it read;
// null elsewhere) merged on world rank 0, which hashes what no rank did (WeightsDigest::complete)
// while the others wait; every rank returns the hex digest.
// `chunk_bytes`: as the ranks' digests were made.
std::string merged_digest(WeightsDigest* mine, const HfFolder* folder_on_root, dist::Communicator& world,
                          uint64_t chunk_bytes = WeightsDigest::kChunkBytes);

// The tensors a base model's identity covers: all of the folder's, but an lm_head.weight that a
// tied head never uses.
std::vector<std::string> identity_tensors(const HfFolder& folder);

// A TensorSource that passes every range it reads, as stored, to `digest` (which must outlive it).
std::unique_ptr<fsdp::TensorSource> digesting_source(std::unique_ptr<fsdp::TensorSource> inner, WeightsDigest& digest);

}  // namespace shardtune::checkpoint
