// PEFT adapter folders (what peft's save_pretrained writes and PeftModel.from_pretrained loads):
// adapter_config.json and adapter_model.safetensors, whose tensors carry PEFT's names,
//   base_model.model.<module>.lora_A.weight   (r, in)
//   base_model.model.<module>.lora_B.weight   (out, r)
// for the model's own names model.layers.N.self_attn.q_proj.lora_A.weight, lm_head.lora_B.weight.
// Also the identity of a base model folder, which adapter checkpoints record.
#pragma once

#include <ATen/core/Tensor.h>

#include <string>
#include <utility>
#include <vector>

#include "checkpoint/hf/hf_folder.h"
#include "runtime/model/llama.h"
#include "runtime/model/lora.h"

namespace shardtune::checkpoint {

inline constexpr const char* kPeftConfigName = "adapter_config.json";
inline constexpr const char* kPeftWeightsName = "adapter_model.safetensors";

struct PeftAdapterConfig {
  model::LoraSpec lora;             // r, alpha, dropout, target modules
  std::string base_model_name_or_path;
};

// Reads and checks adapter_config.json: a LoRA adapter shardtune can train or merge. Anything it
// cannot honour (DoRA, rsLoRA, per-layer ranks, trained biases, modules_to_save, ...) is an error
// naming the file and the key; so is a missing or mistyped key it needs.
PeftAdapterConfig read_peft_config(const std::string& dir);

// PEFT's tensor name of a model adapter parameter, and back ("" when `peft_name` is not one).
std::string peft_tensor_name(const std::string& model_name);
std::string model_tensor_name(const std::string& peft_name);

// Writes `dir` (created; it must not hold an adapter already): adapter_config.json for `config`
// and adapter_model.safetensors with `tensors` (model names, converted to PEFT's), each written
// to a temporary name and renamed.
void write_peft_adapter(const std::string& dir, const PeftAdapterConfig& config,
                        const std::vector<std::pair<std::string, at::Tensor>>& tensors);

// Copies the adapter folder's tensors into the model's adapters, which must have storage (add_lora).
// Every adapter of the model must be in the folder with its shape, and nothing else may be; the
// folder's r, alpha and target modules must be those of `spec` (the job's [peft]). Errors list
// every problem and name the folder.
void load_peft_adapter(model::LlamaForCausalLM& model, const model::LoraSpec& spec, const std::string& dir);

}  // namespace shardtune::checkpoint
