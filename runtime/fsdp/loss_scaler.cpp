// Dynamic loss scaling.
#include "runtime/fsdp/loss_scaler.h"

#include <ATen/ops/maximum.h>
#include <ATen/ops/zeros.h>

namespace shardtune::fsdp {

bool LossScaler::unscale_and_check(const std::vector<FlatParam*>& flats, dist::Communicator& world) {
  // Counted on the device and read once: one host wait per step, not one per flat parameter.
  at::Tensor verdict;
  for (FlatParam* f : flats) {
    if (!f->trainable()) continue;
    const at::Tensor bad = f->grad_shard().isfinite().logical_not().any().to(at::kInt).view({1});
    verdict = verdict.defined() ? at::maximum(verdict, bad) : bad;
  }
  if (!verdict.defined()) verdict = at::zeros({1}, at::kInt);
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
