// Learning-rate schedules: llama-recipes' StepLR (multiply by gamma after every epoch) and linear
// warmup followed by cosine decay to zero.
#pragma once

#include <cstdint>

#include "common/job/job.h"

namespace shardtune::train {

class LrSchedule {
 public:
  // total_steps: optimizer steps of the whole run (for the cosine schedule).
  LrSchedule(const job::TrainSection& train, int64_t total_steps);

  // Learning rate of optimizer step `step` (from 0), taken during `epoch` (from 0).
  double lr(int64_t step, int64_t epoch) const;

 private:
  job::LrScheduler kind_;
  double base_;
  double gamma_;
  int64_t warmup_;
  int64_t total_;
};

}  // namespace shardtune::train
