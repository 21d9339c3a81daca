// Dynamic loss scaling.
#include "runtime/fsdp/loss_scaler.h"

#include <ATen/ops/full.h>

namespace shardtune::fsdp {

bool LossScaler::unscale_and_check(const std::vector<FlatParam*>& flats, dist::Communicator& world) {
  int found = 0;
  for (FlatParam* f : flats)
    if (f->trainable() && !f->grad_shard().isfinite().all().item<bool>()) found = 1;
  at::Tensor verdict = at::full({1}, found, at::kInt);
  world.all_reduce(verdict, dist::ReduceOp::kMax);
  if (verdict.item<int>() != 0) {
    scale_ *= 0.5;
    clean_steps_ = 0;
    ++skipped_;
    return false;
  }
  for (FlatParam* f : flats)
    if (f->trainable()) f->grad_shard().mul_(1.0 / scale_);
  if (++clean_steps_ == growth_interval_) {
    scale_ *= 2.0;
    clean_steps_ = 0;
  }
  return true;
}

}  // namespace shardtune::fsdp
