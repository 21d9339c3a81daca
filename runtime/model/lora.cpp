// LoRA adapters on the Llama model.
#include "runtime/model/lora.h"

#include <ATen/Context.h>
#include <ATen/TensorOperators.h>
#include <ATen/core/Generator.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <mutex>

#include "common/error.h"
#include "common/lora_targets.h"
#include "runtime/model/init.h"
#include "runtime/model/llama.h"

namespace shardtune::model {
namespace {

// The Linear `module` (one of common::kLoraBlockModules) of block `layer`.
Linear& block_linear(DecoderLayer& layer, std::string_view module) {
  if (module == "q_proj") return layer.self_attn.q_proj;
  if (module == "k_proj") return layer.self_attn.k_proj;
  if (module == "v_proj") return layer.self_attn.v_proj;
  if (module == "o_proj") return layer.self_attn.o_proj;
  if (module == "gate_proj") return layer.mlp.gate_proj;
  if (module == "up_proj") return layer.mlp.up_proj;
  return layer.mlp.down_proj;
}

void attach(LoraAdapter& adapter, int64_t in, int64_t out, const LoraSpec& spec, uint64_t id) {
  const at::TensorOptions fp32 = at::TensorOptions().dtype(at::kFloat);
  adapter.r = spec.r;
  adapter.A = at::empty({spec.r, in}, fp32);
  adapter.B = at::empty({out, spec.r}, fp32);
  adapter.scale = spec.scale();
  adapter.dropout = spec.dropout;
  adapter.id = id;
}

}  // namespace

std::vector<std::string> expand_lora_targets(const std::vector<std::string>& targets) {
  std::vector<std::string> out;
  auto add = [&](std::string_view name) {
    if (std::find(out.begin(), out.end(), name) == out.end()) out.emplace_back(name);
  };
  for (const std::string& t : targets) {
    ST_CHECK(common::is_lora_target_name(t), common::ErrorKind::kConfig,
             "LoRA target module \"{}\" is not a Linear of the Llama model: use {}, {} or \"{}\"", t,
             fmt::join(common::kLoraBlockModules, ", "), common::kLoraHeadModule, common::kLoraAllLinear);
    if (t == common::kLoraAllLinear) {
      for (std::string_view p : common::kLoraBlockModules) add(p);
    } else {
      add(t);
    }
  }
  return out;
}

void add_lora(LlamaForCausalLM& model, const LoraSpec& spec, uint64_t seed) {
  ST_CHECK(spec.r > 0, common::ErrorKind::kConfig, "LoRA rank r must be positive, got {}", spec.r);
  const std::vector<std::string> targets = expand_lora_targets(spec.targets);
  const LlamaConfig& c = model.config();
  uint64_t id = 1;  // 0 stays "no module"
  for (int64_t l = 0; l < model.num_layers(); ++l) {
    for (std::string_view module : common::kLoraBlockModules) {
      const uint64_t module_id = id++;
      if (std::find(targets.begin(), targets.end(), module) == targets.end()) continue;
      Linear& linear = block_linear(model.layer(l), module);
      attach(linear.lora, linear.weight.size(1), linear.weight.size(0), spec, module_id);
    }
  }
  if (std::find(targets.begin(), targets.end(), common::kLoraHeadModule) != targets.end())
    attach(model.head_adapter(), c.hidden_size, c.vocab_size, spec, id);
  for (const NamedParam& p : model.named_parameters())
    if (is_adapter_parameter(p.name)) init_parameter(p.name, *p.tensor, c.initializer_range, seed);
}

namespace {
thread_local int g_adapters_off = 0;
}  // namespace

AdaptersOff::AdaptersOff() { ++g_adapters_off; }
AdaptersOff::~AdaptersOff() { --g_adapters_off; }
bool AdaptersOff::active() { return g_adapters_off > 0; }

bool is_adapter_parameter(const std::string& name) {
  return name.find(".lora_A.") != std::string::npos || name.find(".lora_B.") != std::string::npos;
}

at::Tensor seeded_dropout(const at::Tensor& x, double p, uint64_t seed) {
  at::Generator gen = at::globalContext().defaultGenerator(x.device()).clone();
  {
    std::lock_guard<std::mutex> lock(gen.mutex());
    gen.set_current_seed(seed);
  }
  const at::Tensor keep = at::empty_like(x).bernoulli_(1.0 - p, gen);
  return x * keep * (1.0 / (1.0 - p));
}

uint64_t mix_seed(uint64_t a, uint64_t b) {
  uint64_t z = a + 0x9e3779b97f4a7c15ull * (b + 1);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

}  // namespace shardtune::model
