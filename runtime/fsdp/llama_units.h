// Which parameters form which FSDP unit of a Llama: the embedding, each decoder block, the final
// norm and head. Shared by FSDP, the resharding tool and the model writer so they agree.
#pragma once

#include <vector>

#include "runtime/model/llama.h"

namespace shardtune::fsdp {

// Units in forward order: [embedding, block 0, ..., block N-1, norm + head].
std::vector<std::vector<model::NamedParam>> llama_units(model::LlamaForCausalLM& model);

}  // namespace shardtune::fsdp
