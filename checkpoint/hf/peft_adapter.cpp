// PEFT adapter folders: reading, writing, loading into the model; base-model identities.
#include "checkpoint/hf/peft_adapter.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <set>
#include <span>

#include "checkpoint/hf/safetensors_torch.h"
#include "common/error.h"
#include "common/file_io.h"
#include "common/strict_json.h"

namespace shardtune::checkpoint {
namespace {

namespace fs = std::filesystem;
using common::ErrorKind;
using nlohmann::json;

constexpr const char* kPeftPrefix = "base_model.model.";

// A key of adapter_config.json that shardtune cannot honour unless it has its neutral value.
bool is_neutral(const json& v) {
  return v.is_null() || (v.is_boolean() && !v.get<bool>()) || (v.is_object() && v.empty()) ||
         (v.is_array() && v.empty()) || (v.is_string() && v.get<std::string>() == "none");
}

}  // namespace

PeftAdapterConfig read_peft_config(const std::string& dir) {
  const std::string path = (fs::path(dir) / kPeftConfigName).string();
  const std::string text = common::read_file(path, ErrorKind::kIo, "the PEFT adapter config");
  common::StrictJson parsed;
  try {
    parsed = common::parse_json_strict(text.data(), text.data() + text.size());
  } catch (const json::exception& e) {
    common::raise(ErrorKind::kIo, fmt::format("{}: not valid JSON: {}", path, e.what()));
  }
  ST_CHECK(!parsed.too_deep && parsed.value.is_object(), ErrorKind::kIo, "{}: not a JSON object of adapter settings",
           path);
  ST_CHECK(!parsed.duplicate, ErrorKind::kIo, "{}: the key {} appears twice in one object", path,
           common::json_quoted(parsed.duplicate ? parsed.duplicate->second : ""));
  const json& j = parsed.value;
  std::vector<std::string> problems;
  auto need = [&](const char* key, auto check, const char* expected) -> const json* {
    auto it = j.find(key);
    if (it == j.end()) {
      problems.push_back(fmt::format("\"{}\" is missing", key));
      return nullptr;
    }
    if (!check(*it)) {
      problems.push_back(fmt::format("\"{}\" is {}, expected {}", key, it->dump(), expected));
      return nullptr;
    }
    return &*it;
  };
  PeftAdapterConfig c;
  need("peft_type", [](const json& x) { return x == "LORA"; }, "\"LORA\"");
  if (const json* v = need("r", [](const json& x) { return x.is_number_integer() && x.get<int64_t>() > 0; },
                           "a positive integer"))
    c.lora.r = v->get<int64_t>();
  if (const json* v = need("lora_alpha", [](const json& x) { return x.is_number() && x.get<double>() > 0; },
                           "a positive number"))
    c.lora.alpha = v->get<double>();
  if (auto it = j.find("lora_dropout"); it != j.end()) {
    if (it->is_number() && it->get<double>() >= 0 && it->get<double>() < 1) {
      c.lora.dropout = it->get<double>();
    } else {
      problems.push_back(fmt::format("\"lora_dropout\" is {}, expected a number in [0, 1)", it->dump()));
    }
  }
  if (const json* v = need(
          "target_modules",
          [](const json& x) {
            if (x.is_string()) return true;  // PEFT also accepts one name or "all-linear"
            if (!x.is_array() || x.empty()) return false;
            return std::all_of(x.begin(), x.end(), [](const json& n) { return n.is_string(); });
          },
          "a list of module names")) {
    if (v->is_string()) {
      c.lora.targets = {v->get<std::string>()};
    } else {
      for (const json& n : *v) c.lora.targets.push_back(n.get<std::string>());
    }
    try {
      c.lora.targets = model::expand_lora_targets(c.lora.targets);
    } catch (const std::exception& e) {
      problems.push_back(fmt::format("target_modules: {}", e.what()));
    }
  }
  if (auto it = j.find("task_type"); it != j.end() && !it->is_null() && *it != "CAUSAL_LM")
    problems.push_back(fmt::format("\"task_type\" is {}, expected \"CAUSAL_LM\"", it->dump()));
  if (auto it = j.find("base_model_name_or_path"); it != j.end() && it->is_string())
    c.base_model_name_or_path = it->get<std::string>();
  // What would change the adapter's arithmetic or add trained tensors shardtune does not have.
  for (const char* key : {"use_dora", "use_rslora", "fan_in_fan_out", "rank_pattern", "alpha_pattern",
                          "modules_to_save", "layers_to_transform", "layers_pattern", "layer_replication"}) {
    if (auto it = j.find(key); it != j.end() && !is_neutral(*it))
      problems.push_back(fmt::format("\"{}\" is {}: shardtune's LoRA does not support it", key, it->dump()));
  }
  if (auto it = j.find("bias"); it != j.end() && *it != "none")
    problems.push_back(fmt::format("\"bias\" is {}: only \"none\" (no trained biases) is supported", it->dump()));
  ST_CHECK(problems.empty(), ErrorKind::kConfig, "{}: not a LoRA adapter shardtune can use: {}", path,
           fmt::join(problems, "; "));
  return c;
}

std::string peft_tensor_name(const std::string& model_name) { return kPeftPrefix + model_name; }

std::string model_tensor_name(const std::string& peft_name) {
  const std::string prefix = kPeftPrefix;
  if (peft_name.compare(0, prefix.size(), prefix) != 0) return "";
  return peft_name.substr(prefix.size());
}

void write_peft_adapter(const std::string& dir, const PeftAdapterConfig& config,
                        const std::vector<std::pair<std::string, at::Tensor>>& tensors) {
  fs::create_directories(dir);
  ST_CHECK(!fs::exists(fs::path(dir) / kPeftWeightsName) && !fs::exists(fs::path(dir) / kPeftConfigName),
           ErrorKind::kIo, "{} already holds a PEFT adapter: write into a new folder", dir);
  std::vector<std::pair<std::string, at::Tensor>> named;
  for (const auto& [name, t] : tensors) named.emplace_back(peft_tensor_name(name), t);
  write_safetensors((fs::path(dir) / kPeftWeightsName).string(), named, {{"format", "pt"}});
  // The keys PEFT's LoraConfig writes, with the values that mean plain LoRA.
  const json j = {{"peft_type", "LORA"},
                  {"task_type", "CAUSAL_LM"},
                  {"base_model_name_or_path", config.base_model_name_or_path},
                  {"r", config.lora.r},
                  {"lora_alpha", config.lora.alpha},
                  {"lora_dropout", config.lora.dropout},
                  {"target_modules", config.lora.targets},
                  {"bias", "none"},
                  {"fan_in_fan_out", false},
                  {"inference_mode", true},
                  {"init_lora_weights", true},
                  {"use_rslora", false},
                  {"use_dora", false},
                  {"modules_to_save", nullptr},
                  {"layers_to_transform", nullptr},
                  {"layers_pattern", nullptr},
                  {"rank_pattern", json::object()},
                  {"alpha_pattern", json::object()},
                  {"revision", nullptr}};
  common::write_file_atomically((fs::path(dir) / kPeftConfigName).string(), j.dump(2) + "\n");
}

void load_peft_adapter(model::LlamaForCausalLM& model, const model::LoraSpec& spec, const std::string& dir) {
  const PeftAdapterConfig config = read_peft_config(dir);
  std::vector<std::string> problems;
  if (config.lora.r != spec.r)
    problems.push_back(fmt::format("its r is {}, [peft] lora_r is {}", config.lora.r, spec.r));
  if (config.lora.alpha != spec.alpha)
    problems.push_back(fmt::format("its lora_alpha is {}, [peft] lora_alpha is {}", config.lora.alpha, spec.alpha));
  const std::vector<std::string> want = model::expand_lora_targets(spec.targets);
  if (std::set<std::string>(config.lora.targets.begin(), config.lora.targets.end()) !=
      std::set<std::string>(want.begin(), want.end()))
    problems.push_back(fmt::format("its target_modules are [{}], [peft] target_modules are [{}]",
                                   fmt::join(config.lora.targets, ", "), fmt::join(want, ", ")));
  ST_CHECK(problems.empty(), ErrorKind::kConfig, "{} does not match the job's [peft] section: {}", dir,
           fmt::join(problems, "; "));

  const std::string path = (fs::path(dir) / kPeftWeightsName).string();
  const SafetensorsFile file = SafetensorsFile::open(path);
  std::map<std::string, const TensorInfo*> stored;
  for (const TensorInfo& t : file.tensors()) stored.emplace(model_tensor_name(t.name), &t);
  std::set<std::string> used;
  for (const model::NamedParam& p : model.named_parameters()) {
    if (!model::is_adapter_parameter(p.name)) continue;
    auto it = stored.find(p.name);
    const std::vector<int64_t> shape(p.tensor->sizes().begin(), p.tensor->sizes().end());
    if (it == stored.end()) {
      problems.push_back(fmt::format("missing {} (shape [{}])", peft_tensor_name(p.name), fmt::join(shape, ", ")));
      continue;
    }
    used.insert(p.name);
    if (it->second->shape != shape) {
      problems.push_back(fmt::format("{} has shape [{}], the model's adapter [{}]", it->second->name,
                                     fmt::join(it->second->shape, ", "), fmt::join(shape, ", ")));
    } else if (!common::is_floating(it->second->dtype)) {
      problems.push_back(fmt::format("{} is stored as {}, not a float type", it->second->name,
                                     common::safetensors_name(it->second->dtype)));
    }
  }
  for (const auto& [name, info] : stored)
    if (!used.count(name)) problems.push_back(fmt::format("unexpected tensor {}", info->name));
  ST_CHECK(problems.empty(), ErrorKind::kConfig, "{} does not fit the model's adapters ({} problem(s)): {}", path,
           problems.size(), fmt::join(problems, "; "));
  for (const model::NamedParam& p : model.named_parameters())
    if (model::is_adapter_parameter(p.name)) p.tensor->detach().copy_(read_tensor(file, stored.at(p.name)->name));
}

}  // namespace shardtune::checkpoint
