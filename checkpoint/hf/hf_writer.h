// Writing a Hugging Face model folder that transformers' from_pretrained loads: sharded
// safetensors weights with their index, config.json and the tokenizer files.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

namespace shardtune::checkpoint {

// transformers' default max_shard_size for save_pretrained ("5GB").
inline constexpr uint64_t kDefaultMaxShardBytes = 5'000'000'000;

// Writes `tensors` into `dir` (created if needed; it must not already hold weights) in shards of at
// most `max_shard_bytes`, filled in the given order (a tensor larger than the limit gets a shard of
// its own), named as transformers names them: model.safetensors for one shard, otherwise
// model-00001-of-0000N.safetensors plus model.safetensors.index.json. Also writes config.json
// (indent 2) and copies the tokenizer files found in `tokenizer_source_dir` ("" for none). Each
// file is written to a temporary name and renamed; the index is written last.
void write_hf_folder(const std::string& dir, const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                     const nlohmann::json& config, const std::string& tokenizer_source_dir,
                     uint64_t max_shard_bytes = kDefaultMaxShardBytes);

}  // namespace shardtune::checkpoint
