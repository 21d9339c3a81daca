// Loading and saving Hugging Face Llama folders.
#include "checkpoint/hf_model_io.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <set>

#include "checkpoint/hf_writer.h"
#include "checkpoint/safetensors_torch.h"
#include "common/error.h"

namespace shardtune::checkpoint {
namespace {

using common::ErrorKind;

bool is_float(StDtype t) { return t == StDtype::kF32 || t == StDtype::kF16 || t == StDtype::kBF16 || t == StDtype::kF64; }

std::string shape_text(const std::vector<int64_t>& shape) { return fmt::format("[{}]", fmt::join(shape, ", ")); }

}  // namespace

model::LlamaConfig read_hf_config(const HfFolder& folder) {
  return model::LlamaConfig::from_json(folder.config(), folder.dir() + "/config.json");
}

void check_hf_weights(model::LlamaForCausalLM& model, const HfFolder& folder) {
  std::vector<std::string> problems;
  std::set<std::string> expected;
  const std::vector<std::string> names = folder.tensor_names();  // sorted
  for (const model::NamedParam& p : model.named_parameters()) {
    expected.insert(p.name);
    const std::vector<int64_t> want(p.tensor->sizes().begin(), p.tensor->sizes().end());
    if (!std::binary_search(names.begin(), names.end(), p.name)) {
      problems.push_back(fmt::format("missing tensor {} (shape {})", p.name, shape_text(want)));
      continue;
    }
    const TensorInfo& info = folder.info(p.name);
    if (info.shape != want)
      problems.push_back(fmt::format("{} has shape {} in {}, but config.json implies {}", p.name, shape_text(info.shape),
                                     folder.file_of(p.name).path(), shape_text(want)));
    if (!is_float(info.dtype))
      problems.push_back(fmt::format("{} is stored as {} in {}: only F32, F16, BF16 and F64 weights can be trained "
                                     "(quantized checkpoints are not supported)",
                                     p.name, to_string(info.dtype), folder.file_of(p.name).path()));
  }
  for (const std::string& name : names) {
    if (expected.count(name)) continue;
    if (name == "lm_head.weight" && model.config().tie_word_embeddings) {
      spdlog::warn("{}: lm_head.weight is ignored: tie_word_embeddings is true, the head is the embedding", folder.dir());
      continue;
    }
    problems.push_back(fmt::format("unexpected tensor {} in {} (not part of this Llama config)", name,
                                   folder.file_of(name).path()));
  }
  if (!problems.empty())
    common::raise(ErrorKind::kConfig, fmt::format("{} does not match its config.json ({} problem(s)):\n  {}",
                                                  folder.dir(), problems.size(), fmt::join(problems, "\n  ")));
}

void load_hf_weights(model::LlamaForCausalLM& model, const HfFolder& folder) {
  check_hf_weights(model, folder);
  for (const model::NamedParam& p : model.named_parameters()) {
    ST_CHECK(!p.tensor->is_meta(), ErrorKind::kInternal, "load_hf_weights: {} has no storage (materialize first)", p.name);
    at::Tensor stored = read_tensor(folder.file_of(p.name), p.name);
    p.tensor->detach().copy_(stored);
  }
}

void save_hf_model(model::LlamaForCausalLM& model, const std::string& dir, const std::string& tokenizer_source_dir,
                   uint64_t max_shard_bytes) {
  std::vector<std::pair<std::string, at::Tensor>> tensors;
  at::ScalarType dtype = at::kFloat;
  for (const model::NamedParam& p : model.named_parameters()) {
    tensors.emplace_back(p.name, p.tensor->detach().contiguous());
    dtype = p.tensor->scalar_type();
  }
  nlohmann::json config = model.config().to_json();
  config["torch_dtype"] = dtype == at::kBFloat16 ? "bfloat16" : dtype == at::kHalf ? "float16" : "float32";
  write_hf_folder(dir, tensors, config, tokenizer_source_dir, max_shard_bytes);
}

}  // namespace shardtune::checkpoint
