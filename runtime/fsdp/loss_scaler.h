// Dynamic loss scaling for fp16 compute, on sharded gradients: the loss is multiplied by the
// scale before backward; after the reduction every rank checks its gradient shards for inf/NaN,
// the verdict is combined over all ranks, and the step is either skipped (scale halved) or taken
// on unscaled gradients (scale doubled after `growth_interval` clean steps), as torch's GradScaler.
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/dist/communicator.h"
#include "runtime/fsdp/flat_param.h"

namespace shardtune::fsdp {

class LossScaler {
 public:
  explicit LossScaler(double initial_scale = 65536.0, int64_t growth_interval = 2000)
      : scale_(initial_scale), growth_interval_(growth_interval) {}

  double scale() const { return scale_; }
  void set_scale(double scale) { scale_ = scale; }  // when resuming from a checkpoint

  // Collective over `world`. Unscales the gradient shards and returns true when the step may be
  // taken; returns false (and zeroes nothing: the caller zeroes gradients) when any rank saw an
  // inf or NaN, halving the scale.
  bool unscale_and_check(const std::vector<FlatParam*>& flats, dist::Communicator& world);

  int64_t skipped_steps() const { return skipped_; }

 private:
  double scale_;
  int64_t growth_interval_;
  int64_t clean_steps_ = 0;
  int64_t skipped_ = 0;
};

}  // namespace shardtune::fsdp
