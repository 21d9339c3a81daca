// The identity of a base model's weights: SHA-256 over every byte of every tensor as stored, taken
// as the bytes stream by for another reason (the loader's reads, a merge's reads), never in a pass
// of its own. The digest is SHA-256 of one line "<name> <SHA-256 of its bytes>\n" per tensor,
// sorted by name, so the order tensors are read in does not matter; each tensor's own bytes must
// arrive front to back.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "checkpoint/hf/hf_folder.h"
#include "common/sha256.h"
#include "runtime/fsdp/tensor_source.h"

namespace shardtune::checkpoint {

class WeightsDigest {
 public:
  // Expects the identity tensors of `folder` (identity_tensors): the digest of a model's weights.
  explicit WeightsDigest(const HfFolder& folder);

  // The next `size` bytes of tensor `name`, from byte `offset`: each tensor's pieces arrive in order,
  // end to end. Bytes of a tensor the digest does not cover are ignored.
  void add(const std::string& name, uint64_t offset, const void* data, uint64_t size);
  // Reads and adds what no read has passed by yet, in a pass of its own: the storage of weights
  // a rank reads as NF4 records (a bitsandbytes 4-bit folder), which no single reader sees whole.
  void complete(const HfFolder& folder);
  // The digest as hex. Throws common::Error(kInternal) naming a tensor that was not seen whole.
  std::string hex();
  double seconds() const { return seconds_; }  // spent hashing so far

 private:
  struct Tensor {
    uint64_t size = 0;
    uint64_t done = 0;
    common::Sha256 sha;
  };
  std::map<std::string, Tensor> tensors_;
  double seconds_ = 0;
};

// The tensors a base model's identity covers: all of the folder's, but an lm_head.weight that a
// tied head never uses.
std::vector<std::string> identity_tensors(const HfFolder& folder);

// A TensorSource that passes every range it reads, as stored, to `digest` (which must outlive it).
std::unique_ptr<fsdp::TensorSource> digesting_source(std::unique_ptr<fsdp::TensorSource> inner, WeightsDigest& digest);

}  // namespace shardtune::checkpoint
