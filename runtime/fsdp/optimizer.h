// The rank's optimizer over its trainable shards, as training, the trainer and checkpoints use it:
// AdamW (fp32 or 8-bit moments, runtime/fsdp/adamw.h) or Adafactor (runtime/fsdp/adafactor.h).
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace shardtune::fsdp {

class Optimizer {
 public:
  virtual ~Optimizer() = default;

  // Told after each piece of a parameter is updated: the parameter's index and the piece's elements
  // [start, start + count) in flat order, where the parameter and its state now hold the step's
  // values (likely still in cache). The pieces of a parameter come in order and cover it once.
  using PieceObserver = std::function<void(size_t param, int64_t start, int64_t count)>;
  // One update of every parameter from its gradient times `grad_scale` (the clipping coefficient,
  // applied in the update's own pass where the update is fused, so that clipping costs no pass of
  // its own); collective over the optimizer's group where it has one (Adafactor's sums of a
  // tensor's statistics over its shards). The gradients' values afterwards are unspecified.
  virtual void step(double lr, const PieceObserver& updated = nullptr, double grad_scale = 1.0) = 0;
  // The learning rate the next step takes where the schedule gives `lr` (for the metrics): `lr`,
  // unless the optimizer sets its own (Adafactor's relative step).
  virtual double step_size(double lr) const { return lr; }

  // Steps taken. Each parameter also counts its own, as torch.optim keeps state['step'] per
  // parameter: a parameter that starts training later (layers unfrozen on a resume) starts its
  // count, and its fresh state, at 0.
  int64_t step_count() const { return step_; }
  void set_step_count(int64_t step) {  // when resuming from a checkpoint: the run's and every parameter's
    step_ = step;
    std::fill(steps_.begin(), steps_.end(), step);
  }
  int64_t param_step(size_t i) const { return steps_.at(i); }
  void set_param_step(size_t i, int64_t step) { steps_.at(i) = step; }
  // State to zero and no step taken, as when the parameters were added.
  virtual void reset_state() = 0;
  virtual int64_t state_bytes() const = 0;
  // Every parameter and state tensor of this rank is finite.
  virtual bool all_finite() const = 0;
  size_t size() const { return steps_.size(); }
  // How the job file and a checkpoint's manifest name it ("adamw", "adamw_8bit", "adafactor"), and
  // in words, for the log.
  virtual std::string name() const = 0;
  virtual std::string description() const = 0;

 protected:
  int64_t step_ = 0;
  std::vector<int64_t> steps_;  // per parameter
};

}  // namespace shardtune::fsdp
