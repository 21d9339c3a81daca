// What a checkpoint holds of a model and its optimizer, flat parameter by flat parameter: the
// shard of each (all of them, or a LoRA model's adapters alone) and, of those that train, the
// optimizer's state: AdamW's two moments (an 8-bit AdamW's decoded, with their scales), or
// Adafactor's statistics and first moment. Saving and loading walk the same list.
#pragma once

#include <string>
#include <vector>

#include "checkpoint/full_file.h"
#include "runtime/fsdp/optimizer.h"
#include "runtime/fsdp/fsdp_llama.h"

namespace shardtune::checkpoint {

// The flat parameters a checkpoint holds: all of them, or only the trainable ones (the adapters of
// a LoRA model, whose frozen base is the base model's own).
std::vector<fsdp::FlatParam*> saved_flats(fsdp::FsdpLlama& model, bool adapters_only);

// One kind of state of one flat parameter: a tensor laid out as `layout`'s shard `shard` (the flat's
// own layout and shard; for the scales its block layout; for Adafactor's statistics theirs).
struct FlatState {
  std::string kind;
  at::Tensor tensor;
  const fsdp::FlatLayout* layout = nullptr;
  int shard = -1;  // -1: the flat parameter's shard
  int shard_of(const fsdp::FlatParam& f) const { return shard >= 0 ? shard : f.shard_rank(); }
};

// What a checkpoint holds of one flat parameter, by kind: its shard, and the optimizer's state of
// it when the optimizer is given and the parameter trains. `trainable_index` counts trainable flats
// seen. To save (`for_load` false) or to load: for an 8-bit AdamW, the moments are fp32 copies
// decoded on the host, or zeros on the shard's device for a load to fill (AdamW::encode_moments
// then encodes them); Adafactor's statistics (the same on every rank of a shard group) are this
// rank's share of them, or all of them.
std::vector<FlatState> state_of(fsdp::FlatParam* f, fsdp::Optimizer* optimizer, size_t& trainable_index,
                                bool for_load = false);

// Every saved flat parameter's state, kind by kind, as units of this rank's shards.
std::vector<FullUnit> saved_units(fsdp::FsdpLlama& model, fsdp::Optimizer* optimizer, bool adapters_only);

// The optimizer's elements per scale in a checkpoint's manifest (0: none).
int64_t optimizer_state_block(const fsdp::Optimizer& optimizer);

}  // namespace shardtune::checkpoint
