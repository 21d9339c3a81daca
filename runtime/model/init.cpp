// Materialisation and transformers-style initialisation.
#include "runtime/model/init.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/Generator.h>
#include <ATen/ops/empty.h>

#include <cmath>
#include <string>

namespace shardtune::model {

void materialize(LlamaForCausalLM& model, const at::TensorOptions& options) {
  for (NamedParam& p : model.named_parameters()) *p.tensor = at::empty(p.tensor->sizes(), options);
}

uint64_t parameter_seed(uint64_t seed, const std::string& name) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (unsigned char c : name) h = (h ^ c) * 1099511628211ull;
  return seed ^ h;
}

void init_parameter(const std::string& name, at::Tensor& t, double std, uint64_t seed) {
  auto ends_with = [&](const char* suffix) {
    const std::string s(suffix);
    return name.size() >= s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0;
  };
  const bool is_norm = name.find("norm.weight") != std::string::npos;
  if (is_norm) {
    t.fill_(1.0);
  } else if (ends_with(".bias") || ends_with(".lora_B.weight")) {
    t.zero_();  // LoRA's B starts at zero: training starts from the base model's outputs
  } else {
    at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(parameter_seed(seed, name));
    // Drawn on the CPU so values match whatever the device. LoRA's A as PEFT draws it:
    // kaiming_uniform_(a=√5), which is U(−1/√fan_in, 1/√fan_in).
    at::Tensor host = at::empty(t.sizes(), t.options().device(at::kCPU));
    if (ends_with(".lora_A.weight")) {
      const double bound = 1.0 / std::sqrt(static_cast<double>(t.size(1)));
      host.uniform_(-bound, bound, gen);
    } else {
      host.normal_(0.0, std, gen);
    }
    t.copy_(host);
  }
}

void init_weights(LlamaForCausalLM& model, uint64_t seed) {
  const double std = model.config().initializer_range;
  for (NamedParam& p : model.named_parameters()) init_parameter(p.name, *p.tensor, std, seed);
}

}  // namespace shardtune::model
