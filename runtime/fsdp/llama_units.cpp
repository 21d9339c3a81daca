// Llama's FSDP units by Hugging Face parameter name.
#include "runtime/fsdp/llama_units.h"

#include <string>

namespace shardtune::fsdp {

std::vector<std::vector<model::NamedParam>> llama_units(model::LlamaForCausalLM& model) {
  std::vector<std::vector<model::NamedParam>> units(static_cast<size_t>(model.num_layers()) + 2);
  const std::string layers = "model.layers.";
  for (const model::NamedParam& p : model.named_parameters()) {
    if (p.name == "model.embed_tokens.weight") {
      units.front().push_back(p);
    } else if (p.name.compare(0, layers.size(), layers) == 0) {
      units.at(1 + std::stoul(p.name.substr(layers.size()))).push_back(p);
    } else {
      units.back().push_back(p);  // model.norm.weight, lm_head.weight
    }
  }
  return units;
}

}  // namespace shardtune::fsdp
