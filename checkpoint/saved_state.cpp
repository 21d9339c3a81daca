// The state a checkpoint holds.
#include "checkpoint/saved_state.h"

#include <ATen/ops/zeros.h>

#include "checkpoint/manifest.h"
#include "runtime/fsdp/adam8bit.h"

namespace shardtune::checkpoint {

std::vector<fsdp::FlatParam*> saved_flats(fsdp::FsdpLlama& model, bool adapters_only) {
  std::vector<fsdp::FlatParam*> out;
  for (fsdp::FlatParam* f : model.flat_params())
    if (!adapters_only || f->trainable()) out.push_back(f);
  return out;
}

std::vector<FlatState> state_of(fsdp::FlatParam* f, fsdp::AdamW* optimizer, size_t& trainable_index, bool decode) {
  std::vector<FlatState> out;
  out.push_back({kParamKind, f->shard(), &f->layout()});
  if (f->trainable() && optimizer != nullptr && optimizer->size() > trainable_index) {
    const size_t i = trainable_index;
    if (!optimizer->config().blockwise_8bit) {
      out.push_back({"exp_avg", optimizer->exp_avg(i), &f->layout()});
      out.push_back({"exp_avg_sq", optimizer->exp_avg_sq(i), &f->layout()});
    } else {
      const auto moment = [&](int m) {
        return decode ? optimizer->decoded(i, m)
                      : at::zeros({f->shard().numel()}, f->shard().options().dtype(at::kFloat));
      };
      out.push_back({"exp_avg", moment(0), &f->layout()});
      out.push_back({"exp_avg_sq", moment(1), &f->layout()});
      const fsdp::FlatLayout* blocks = &f->block_layout(fsdp::kAdam8bitBlock);
      out.push_back({"exp_avg_absmax", optimizer->absmax(i, 0), blocks});
      out.push_back({"exp_avg_sq_absmax", optimizer->absmax(i, 1), blocks});
    }
  }
  if (f->trainable()) ++trainable_index;
  return out;
}

std::vector<FullUnit> saved_units(fsdp::FsdpLlama& model, fsdp::AdamW* optimizer, bool adapters_only) {
  std::vector<FullUnit> units;
  size_t trainable_index = 0;
  for (fsdp::FlatParam* f : saved_flats(model, adapters_only))
    for (FlatState& s : state_of(f, optimizer, trainable_index))
      units.push_back({s.kind, s.layout, f->shard_rank(), s.tensor, {}});
  return units;
}

std::string optimizer_name(const fsdp::AdamW& optimizer) {
  return optimizer.config().blockwise_8bit ? "adamw_8bit" : "adamw";
}

int64_t optimizer_state_block(const fsdp::AdamW& optimizer) {
  return optimizer.config().blockwise_8bit ? fsdp::kAdam8bitBlock : 0;
}

}  // namespace shardtune::checkpoint
