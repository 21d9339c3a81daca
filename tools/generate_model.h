// The model `shardtune generate` runs, from whatever the user has: a Hugging Face folder, a
// checkpoint (full or sharded, written at any world size), a job's output folder (its newest
// checkpoint), or an adapter checkpoint (LoRA, QLoRA) with its base. Adapters stay separate
// modules, as in training; a QLoRA base computes with its projections' NF4 values, as in training.
#pragma once

#include <memory>
#include <string>

#include "runtime/model/llama.h"

namespace shardtune::tools {

struct GenerationModel {
  std::unique_ptr<model::LlamaForCausalLM> model;
  std::string tokenizer;    // the tokenizer.json it speaks (empty: none found)
  std::string chat_format;  // the job's [data] chat_format when it trained on chat data, else "auto"
  std::string description;  // what was loaded, for the log
};

// `base` overrides the base folder an adapter checkpoint records; `tokenizer` the tokenizer found.
// Throws common::Error naming the folder and what is missing or does not match.
GenerationModel load_generation_model(const std::string& source, const std::string& base, const std::string& tokenizer,
                                      const at::TensorOptions& options);

}  // namespace shardtune::tools
