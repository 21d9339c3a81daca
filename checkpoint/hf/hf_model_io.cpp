// Loading and saving Hugging Face Llama folders.
#include "checkpoint/hf/hf_model_io.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include "checkpoint/hf/hf_tensor_source.h"
#include "checkpoint/hf/hf_writer.h"
#include "checkpoint/hf/safetensors_torch.h"
#include "common/error.h"
#include "runtime/fsdp/shard_loader.h"
#include "runtime/model/lora.h"

namespace shardtune::checkpoint {
using common::ErrorKind;

model::LlamaConfig read_hf_config(const HfFolder& folder) {
  return model::LlamaConfig::from_json(folder.config(), folder.dir() + "/config.json");
}

std::vector<std::string> check_hf_weights(model::LlamaForCausalLM& model, const HfFolder& folder) {
  std::vector<std::string> ignored;
  const std::vector<std::string> problems = fsdp::weight_mismatches(model, HfTensorSource(folder.dir()), &ignored);
  if (!problems.empty())
    common::raise(ErrorKind::kConfig, fmt::format("{} does not match its config.json ({} problem(s)):\n  {}",
                                                  folder.dir(), problems.size(), fmt::join(problems, "\n  ")));
  return ignored;
}

void load_hf_weights(model::LlamaForCausalLM& model, const HfFolder& folder, WeightsDigest* digest) {
  const std::vector<std::string> ignored = check_hf_weights(model, folder);
  if (!ignored.empty()) spdlog::info("{}: {}", folder.dir(), fsdp::ignored_tensors_note(ignored));
  for (const model::NamedParam& p : model.named_parameters()) {
    if (model::is_adapter_parameter(p.name)) continue;  // LoRA adapters are not base weights
    ST_CHECK(!p.tensor->is_meta(), ErrorKind::kInternal, "load_hf_weights: {} has no storage (materialize first)", p.name);
    at::Tensor stored = read_tensor(folder.file_of(p.name), p.name);
    p.tensor->detach().copy_(stored);
    if (digest != nullptr) {
      const std::span<const std::byte> bytes = folder.file_of(p.name).bytes(folder.info(p.name));
      digest->add(p.name, 0, bytes.data(), bytes.size());
    }
  }
}

void save_hf_model(model::LlamaForCausalLM& model, const std::string& dir, const std::string& tokenizer_source_dir,
                   uint64_t max_shard_bytes) {
  std::vector<std::pair<std::string, at::Tensor>> tensors;
  at::ScalarType dtype = at::kFloat;
  for (const model::NamedParam& p : model.named_parameters()) {
    ST_CHECK(!model::is_adapter_parameter(p.name), ErrorKind::kInternal,
             "save_hf_model: {} is a LoRA adapter; merge adapters into the weights first", p.name);
    tensors.emplace_back(p.name, p.tensor->detach().contiguous());
    dtype = p.tensor->scalar_type();
  }
  nlohmann::json config = model.config().to_json();
  config["torch_dtype"] = dtype == at::kBFloat16 ? "bfloat16" : dtype == at::kHalf ? "float16" : "float32";
  write_hf_folder(dir, tensors, config, tokenizer_source_dir, max_shard_bytes);
}

}  // namespace shardtune::checkpoint
