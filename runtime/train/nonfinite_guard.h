// What a non-finite step does to a run ([train] on_nonfinite): train_step has already refused the
// update; this decides whether the run goes on. Every rank sees the same reduced loss and norm, so
// every rank decides alike.
#pragma once

#include <cstdint>

#include "common/job/job.h"
#include "runtime/train/train_step.h"

namespace shardtune::train {

class NonFiniteGuard {
 public:
  NonFiniteGuard(job::OnNonFinite policy, int64_t max_in_a_row) : policy_(policy), max_in_a_row_(max_in_a_row) {}

  // After optimizer step `step` (1-based): throws common::Error(kDiverged) naming the step when the
  // run must stop (policy stop, or max_in_a_row non-finite steps in a row under skip_step).
  void after_step(int64_t step, const StepResult& r);
  // Before a checkpoint of `step`: throws common::Error(kDiverged) when the weights or optimizer
  // moments are not all finite (an update that overflowed them); no checkpoint is written.
  static void before_save(int64_t step, bool weights_finite);

  int64_t skipped() const { return skipped_; }  // non-finite steps of this run

 private:
  job::OnNonFinite policy_;
  int64_t max_in_a_row_;
  int64_t in_a_row_ = 0;
  int64_t skipped_ = 0;
};

}  // namespace shardtune::train
