// LoRA (low-rank adaptation) on the Llama model, as PEFT's lora.Linear defines it:
//   y = W·x + b + scale · B·A·dropout(x),   scale = alpha / r,
// with A (r × in) drawn Kaiming-uniform (PEFT's default: U(−1/√in, 1/√in)) and B (out × r) zero,
// so training starts from the base model's outputs. Adapters are ordinary parameters of the
// model, named as PEFT names them in memory without its adapter name:
//   model.layers.3.self_attn.q_proj.lora_A.weight, ..., lm_head.lora_B.weight.
// Everything else (the base) is what gets frozen; the model itself knows nothing of sharding.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

namespace shardtune::model {

class LlamaForCausalLM;

struct LoraSpec {
  int64_t r = 8;
  double alpha = 32.0;
  double dropout = 0.0;
  std::vector<std::string> targets;  // module names (common/lora_targets.h): q_proj ... lm_head, all-linear
  double scale() const { return alpha / static_cast<double>(r); }
};

// `targets` with "all-linear" replaced by the seven projections of a block (as PEFT expands it for
// a causal LM: lm_head stays out unless named), each name once. Throws common::Error(kConfig)
// naming an unknown name and listing the known ones.
std::vector<std::string> expand_lora_targets(const std::vector<std::string>& targets);

// Adds adapters to every targeted Linear of `model`, on the CPU in fp32, initialised as PEFT does:
// each A from its own generator, seeded from `seed` and the parameter's name (so its values do not
// depend on which rank makes them), each B zero.
void add_lora(LlamaForCausalLM& model, const LoraSpec& spec, uint64_t seed);

// While one lives, on its thread, every adapter adds nothing: the model computes its base alone
// (DPO's reference of a LoRA job, as PEFT's disable_adapter()). Nests.
class AdaptersOff {
 public:
  AdaptersOff();
  ~AdaptersOff();
  AdaptersOff(const AdaptersOff&) = delete;
  AdaptersOff& operator=(const AdaptersOff&) = delete;
  static bool active();
};

// Whether a parameter name is an adapter's (".lora_A." or ".lora_B.").
bool is_adapter_parameter(const std::string& name);

// Inverted dropout with its mask drawn from `seed` on x's device: x · keep / (1 − p), keep ~
// Bernoulli(1 − p). The same seed gives the same mask.
at::Tensor seeded_dropout(const at::Tensor& x, double p, uint64_t seed);

// A 64-bit mix of two values (splitmix64 of their combination): derives independent seeds for
// steps, micro-batches, ranks and modules from one job seed.
uint64_t mix_seed(uint64_t a, uint64_t b);

}  // namespace shardtune::model
