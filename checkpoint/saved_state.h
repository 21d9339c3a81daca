// What a checkpoint holds of a model and its optimizer, flat parameter by flat parameter: the
// shard of each (all of them, or a LoRA model's adapters alone) and, of those that train, AdamW's
// two moments (an 8-bit AdamW's decoded, with their scales). Saving and loading walk the same list.
#pragma once

#include <string>
#include <vector>

#include "checkpoint/full_file.h"
#include "runtime/fsdp/adamw.h"
#include "runtime/fsdp/fsdp_llama.h"

namespace shardtune::checkpoint {

// The flat parameters a checkpoint holds: all of them, or only the trainable ones (the adapters of
// a LoRA model, whose frozen base is the base model's own).
std::vector<fsdp::FlatParam*> saved_flats(fsdp::FsdpLlama& model, bool adapters_only);

// One kind of state of one flat parameter: a tensor laid out as `layout`'s shard (the flat's own
// layout, or for the scales its block layout).
struct FlatState {
  std::string kind;
  at::Tensor tensor;
  const fsdp::FlatLayout* layout = nullptr;
};

// What a checkpoint holds of one flat parameter, by kind: its shard, and the optimizer's state of
// it when the optimizer is given and the parameter trains. `trainable_index` counts trainable flats
// seen. For an 8-bit AdamW, the moments are fp32 copies, decoded on the host (`decode`), or zeros
// on the shard's device for a load to fill (AdamW::encode_moments then encodes them).
std::vector<FlatState> state_of(fsdp::FlatParam* f, fsdp::AdamW* optimizer, size_t& trainable_index,
                                bool decode = true);

// Every saved flat parameter's state, kind by kind, as units of this rank's shards.
std::vector<FullUnit> saved_units(fsdp::FsdpLlama& model, fsdp::AdamW* optimizer, bool adapters_only);

// How a checkpoint's manifest names the optimizer ("adamw" or "adamw_8bit"), and its elements per
// scale (0: none).
std::string optimizer_name(const fsdp::AdamW& optimizer);
int64_t optimizer_state_block(const fsdp::AdamW& optimizer);

}  // namespace shardtune::checkpoint
