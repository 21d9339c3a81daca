// shardtune-make-model: writes a randomly initialised Llama as a Hugging Face folder, one
// safetensors file per unit (embedding, each block, head), holding one unit in memory at a time,
// so that models far larger than memory can be made for tests and benchmarks. Values are those
// of model::init_weights with the same seed.
//   shardtune-make-model OUT_DIR [--preset tiny | --config config.json] [--layers N] [--hidden H]
//                        [--intermediate I] [--vocab V] [--dtype bf16|fp32] [--seed S]
#include <CLI/CLI.hpp>
#include <ATen/ops/empty.h>
#include <fmt/format.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "checkpoint/hf/safetensors_torch.h"
#include "common/error.h"
#include "common/interrupt_cleanup.h"
#include "runtime/fsdp/llama_units.h"
#include "runtime/model/init.h"
#include "runtime/model/llama.h"

using namespace shardtune;

int main(int argc, char** argv) {
  CLI::App app{"Write a random Llama as a Hugging Face safetensors folder, one unit at a time"};
  std::string out, config_path, dtype_name = "bf16";
  int64_t layers = 0, hidden = 0, intermediate = 0, vocab = 0;
  uint64_t seed = 42;
  app.add_option("out", out, "Output folder (must not hold weights)")->required();
  app.add_option("--config", config_path, "A config.json to start from (default: the tiny preset)");
  app.add_option("--layers", layers, "num_hidden_layers");
  app.add_option("--hidden", hidden, "hidden_size (head_dim stays, heads follow)");
  app.add_option("--intermediate", intermediate, "intermediate_size");
  app.add_option("--vocab", vocab, "vocab_size");
  app.add_option("--dtype", dtype_name, "Stored dtype")->check(CLI::IsMember({"bf16", "fp32"}));
  app.add_option("--seed", seed, "Initialisation seed");
  CLI11_PARSE(app, argc, argv);
  common::remove_temporaries_on_interrupt();  // an interrupted write leaves no partial folder
  try {
    model::LlamaConfig c = config_path.empty() ? model::LlamaConfig::tiny() : model::LlamaConfig::from_file(config_path);
    if (layers > 0) c.num_hidden_layers = layers;
    if (hidden > 0) {
      c.hidden_size = hidden;
      c.num_attention_heads = hidden / c.head_dim;
      c.num_key_value_heads = std::max<int64_t>(1, c.num_attention_heads / 4);
    }
    if (intermediate > 0) c.intermediate_size = intermediate;
    if (vocab > 0) c.vocab_size = vocab;
    const at::ScalarType dtype = dtype_name == "bf16" ? at::kBFloat16 : at::kFloat;
    c.torch_dtype = dtype_name == "bf16" ? "bfloat16" : "float32";

    namespace fs = std::filesystem;
    fs::create_directories(out);
    ST_CHECK(!fs::exists(fs::path(out) / "model.safetensors.index.json"), common::ErrorKind::kIo,
             "{} already holds a model", out);
    model::LlamaForCausalLM skeleton(c, at::TensorOptions().device(at::kMeta));
    const std::vector<std::vector<model::NamedParam>> units = fsdp::llama_units(skeleton);
    nlohmann::json weight_map = nlohmann::json::object();
    uint64_t total = 0;
    for (size_t u = 0; u < units.size(); ++u) {
      const std::string file = fmt::format("model-{:05d}-of-{:05d}.safetensors", u + 1, units.size());
      std::vector<std::pair<std::string, at::Tensor>> tensors;
      for (const model::NamedParam& p : units[u]) {
        at::Tensor t = at::empty(p.tensor->sizes(), at::kFloat);
        model::init_parameter(p.name, t, c.initializer_range, seed);
        tensors.emplace_back(p.name, t.to(dtype));
        weight_map[p.name] = file;
        total += static_cast<uint64_t>(tensors.back().second.nbytes());
      }
      checkpoint::write_safetensors((fs::path(out) / file).string(), tensors, {{"format", "pt"}});
    }
    std::ofstream(fs::path(out) / "model.safetensors.index.json")
        << nlohmann::json{{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}}.dump(2);
    std::ofstream(fs::path(out) / "config.json") << c.to_json().dump(2);
    fmt::print("{}: {:.1f}M parameters, {:.3f} GB in {} files\n", out, static_cast<double>(c.num_parameters()) / 1e6,
               static_cast<double>(total) / 1e9, units.size());
  } catch (const std::exception& e) {
    fmt::print(stderr, "shardtune-make-model: {}\n", e.what());
    return 1;
  }
  return 0;
}
