// The state a checkpoint holds.
#include "checkpoint/saved_state.h"

#include "checkpoint/manifest.h"

namespace shardtune::checkpoint {

std::vector<fsdp::FlatParam*> saved_flats(fsdp::FsdpLlama& model, bool adapters_only) {
  std::vector<fsdp::FlatParam*> out;
  for (fsdp::FlatParam* f : model.flat_params())
    if (!adapters_only || f->trainable()) out.push_back(f);
  return out;
}

std::vector<std::pair<std::string, at::Tensor>> state_of(fsdp::FlatParam* f, fsdp::AdamW* optimizer,
                                                         size_t& trainable_index) {
  std::vector<std::pair<std::string, at::Tensor>> out;
  out.emplace_back(kParamKind, f->shard());
  if (f->trainable() && optimizer != nullptr && optimizer->size() > trainable_index) {
    out.emplace_back("exp_avg", optimizer->exp_avg(trainable_index));
    out.emplace_back("exp_avg_sq", optimizer->exp_avg_sq(trainable_index));
  }
  if (f->trainable()) ++trainable_index;
  return out;
}

std::vector<FullUnit> saved_units(fsdp::FsdpLlama& model, fsdp::AdamW* optimizer, bool adapters_only) {
  std::vector<FullUnit> units;
  size_t trainable_index = 0;
  for (fsdp::FlatParam* f : saved_flats(model, adapters_only))
    for (auto& [kind, shard] : state_of(f, optimizer, trainable_index))
      units.push_back({kind, &f->layout(), f->shard_rank(), shard, {}});
  return units;
}

}  // namespace shardtune::checkpoint
