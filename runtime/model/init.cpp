// Materialisation and transformers-style initialisation.
#include "runtime/model/init.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/Generator.h>
#include <ATen/ops/empty.h>

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
  const bool is_norm = name.find("norm.weight") != std::string::npos;
  const bool is_bias = name.size() > 5 && name.compare(name.size() - 5, 5, ".bias") == 0;
  if (is_norm) {
    t.fill_(1.0);
  } else if (is_bias) {
    t.zero_();
  } else {
    at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(parameter_seed(seed, name));
    if (t.device().is_cpu()) {
      t.normal_(0.0, std, gen);
    } else {
      // Draw on the CPU so values match whatever the device.
      t.copy_(at::empty(t.sizes(), t.options().device(at::kCPU)).normal_(0.0, std, gen));
    }
  }
}

void init_weights(LlamaForCausalLM& model, uint64_t seed) {
  const double std = model.config().initializer_range;
  for (NamedParam& p : model.named_parameters()) init_parameter(p.name, *p.tensor, std, seed);
}

}  // namespace shardtune::model
