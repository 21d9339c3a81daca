// What a checkpoint holds of a model and its optimizer, flat parameter by flat parameter: the
// shard of each (all of them, or a LoRA model's adapters alone) and AdamW's two moments of those
// that train. Saving and loading walk the same list.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "checkpoint/full_file.h"
#include "runtime/fsdp/adamw.h"
#include "runtime/fsdp/fsdp_llama.h"

namespace shardtune::checkpoint {

// The flat parameters a checkpoint holds: all of them, or only the trainable ones (the adapters of
// a LoRA model, whose frozen base is the base model's own).
std::vector<fsdp::FlatParam*> saved_flats(fsdp::FsdpLlama& model, bool adapters_only);

// What a checkpoint holds of one flat parameter, by kind: its shard, and AdamW's moments of it when
// the optimizer is given and the parameter trains. `trainable_index` counts trainable flats seen.
std::vector<std::pair<std::string, at::Tensor>> state_of(fsdp::FlatParam* f, fsdp::AdamW* optimizer,
                                                         size_t& trainable_index);

// Every saved flat parameter's state, kind by kind, as units of this rank's shards.
std::vector<FullUnit> saved_units(fsdp::FsdpLlama& model, fsdp::AdamW* optimizer, bool adapters_only);

}  // namespace shardtune::checkpoint
