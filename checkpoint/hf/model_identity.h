// What identifies a base model: SHA-256 of its config.json bytes, of its tensor index (one line
// "name dtype [shape]" per tensor, sorted by name), and of every byte of its weights
// (weights_digest.h, taken while the weights are read for another reason). Checkpoints written
// before the full digest recorded the SHA-256 of each tensor's first 64 bytes instead; that sample
// is still computed (a page read per tensor) so they can be compared.
#pragma once

#include <string>

#include "checkpoint/hf/hf_folder.h"

namespace shardtune::checkpoint {

struct ModelIdentity {
  std::string config_sha256;
  std::string tensors_sha256;
  std::string weights_sha256;         // every byte; empty when not taken
  std::string weights_sample_sha256;  // the first 64 bytes of every tensor, by name
};

// The folder's config, index and sample hashes; `weights_sha256` is the WeightsDigest of its bytes.
ModelIdentity model_identity(const HfFolder& folder, const std::string& weights_sha256);

}  // namespace shardtune::checkpoint
