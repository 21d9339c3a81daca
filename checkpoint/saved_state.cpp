// The state a checkpoint holds.
#include "checkpoint/saved_state.h"

#include <ATen/ops/zeros.h>

#include "checkpoint/manifest.h"
#include "runtime/fsdp/adafactor.h"
#include "runtime/fsdp/adam8bit.h"
#include "runtime/fsdp/adamw.h"

namespace shardtune::checkpoint {

std::vector<fsdp::FlatParam*> saved_flats(fsdp::FsdpLlama& model, bool adapters_only) {
  std::vector<fsdp::FlatParam*> out;
  for (fsdp::FlatParam* f : model.flat_params())
    if (!adapters_only || f->trainable()) out.push_back(f);
  return out;
}

namespace {

void adamw_state(std::vector<FlatState>& out, fsdp::FlatParam* f, fsdp::AdamW& adamw, size_t i, bool for_load) {
  if (!adamw.config().blockwise_8bit) {
    out.push_back({"exp_avg", adamw.exp_avg(i), &f->layout()});
    out.push_back({"exp_avg_sq", adamw.exp_avg_sq(i), &f->layout()});
    return;
  }
  const auto moment = [&](int m) {
    return for_load ? at::zeros({f->shard().numel()}, f->shard().options().dtype(at::kFloat)) : adamw.decoded(i, m);
  };
  out.push_back({"exp_avg", moment(0), &f->layout()});
  out.push_back({"exp_avg_sq", moment(1), &f->layout()});
  const fsdp::FlatLayout* blocks = &f->block_layout(fsdp::kAdam8bitBlock);
  out.push_back({"exp_avg_absmax", adamw.absmax(i, 0), blocks});
  out.push_back({"exp_avg_sq_absmax", adamw.absmax(i, 1), blocks});
}

void adafactor_state(std::vector<FlatState>& out, fsdp::FlatParam* f, fsdp::Adafactor& adafactor, size_t i,
                     bool for_load) {
  if (adafactor.exp_avg(i).defined()) out.push_back({"exp_avg", adafactor.exp_avg(i), &f->layout()});
  for (const fsdp::AdafactorStatistic kind : {fsdp::kRowMeans, fsdp::kColumnMeans, fsdp::kVectorMoments}) {
    const fsdp::Adafactor::Statistics s = adafactor.statistics(i, kind, for_load);
    if (!s.layout->params().empty()) out.push_back({fsdp::kAdafactorStatistics[kind], s.tensor, s.layout, s.shard});
  }
}

}  // namespace

std::vector<FlatState> state_of(fsdp::FlatParam* f, fsdp::Optimizer* optimizer, size_t& trainable_index, bool for_load) {
  std::vector<FlatState> out;
  out.push_back({kParamKind, f->shard(), &f->layout()});
  if (f->trainable() && optimizer != nullptr && optimizer->size() > trainable_index) {
    if (auto* adamw = dynamic_cast<fsdp::AdamW*>(optimizer)) adamw_state(out, f, *adamw, trainable_index, for_load);
    if (auto* adafactor = dynamic_cast<fsdp::Adafactor*>(optimizer))
      adafactor_state(out, f, *adafactor, trainable_index, for_load);
  }
  if (f->trainable()) ++trainable_index;
  return out;
}

std::vector<FullUnit> saved_units(fsdp::FsdpLlama& model, fsdp::Optimizer* optimizer, bool adapters_only) {
  std::vector<FullUnit> units;
  size_t trainable_index = 0;
  for (fsdp::FlatParam* f : saved_flats(model, adapters_only))
    for (FlatState& s : state_of(f, optimizer, trainable_index))
      units.push_back({s.kind, s.layout, s.shard_of(*f), s.tensor, {}});
  return units;
}

int64_t optimizer_state_block(const fsdp::Optimizer& optimizer) {
  return optimizer.name() == "adamw_8bit" ? fsdp::kAdam8bitBlock : 0;
}

}  // namespace shardtune::checkpoint
