// A Hugging Face Llama folder ↔ LlamaForCausalLM: every name and shape checked against the
// model before any weight is copied, every problem reported at once.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

#include "checkpoint/hf/hf_folder.h"
#include "checkpoint/hf/weights_digest.h"
#include "runtime/model/llama.h"

namespace shardtune::checkpoint {

// The model's config from the folder's config.json (errors name "<dir>/config.json").
model::LlamaConfig read_hf_config(const HfFolder& folder);

// Throws common::Error(kConfig) listing every tensor the model needs but the folder lacks, every
// tensor the folder has that the model does not, every shape that differs from config.json and
// every dtype that is not a float type. Checks only headers: no weight is read. Returns the
// tensors it ignores, as transformers does (model::is_ignored_checkpoint_tensor).
std::vector<std::string> check_hf_weights(model::LlamaForCausalLM& model, const HfFolder& folder);

// check_hf_weights, then copies every tensor into the model's parameters (which must have
// storage), converted to each parameter's dtype. LoRA adapters are not base weights: untouched.
// `digest`, when given, hears every stored byte as it is read (the base model's identity).
void load_hf_weights(model::LlamaForCausalLM& model, const HfFolder& folder, WeightsDigest* digest = nullptr);

// Writes the model as a Hugging Face folder: safetensors shards of at most max_shard_bytes with
// an index, config.json, and the tokenizer files of tokenizer_source_dir ("" for none).
void save_hf_model(model::LlamaForCausalLM& model, const std::string& dir, const std::string& tokenizer_source_dir,
                   uint64_t max_shard_bytes = 5'000'000'000);

}  // namespace shardtune::checkpoint
