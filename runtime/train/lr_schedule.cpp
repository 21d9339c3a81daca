// Learning-rate schedules.
#include "runtime/train/lr_schedule.h"

#include <algorithm>
#include <cmath>

namespace shardtune::train {

LrSchedule::LrSchedule(const job::TrainSection& train, int64_t total_steps)
    : kind_(train.lr_scheduler), base_(train.lr), gamma_(train.gamma), warmup_(train.warmup_steps),
      total_(std::max<int64_t>(total_steps, 1)) {}

double LrSchedule::lr(int64_t step, int64_t epoch) const {
  if (kind_ == job::LrScheduler::kStep) return base_ * std::pow(gamma_, static_cast<double>(epoch));
  // Warmup from lr/warmup to lr (step 0 already trains), then cosine from lr down to 0 at the end.
  if (step < warmup_) return base_ * static_cast<double>(step + 1) / static_cast<double>(warmup_);
  const double progress =
      std::min(1.0, static_cast<double>(step - warmup_) / static_cast<double>(std::max<int64_t>(total_ - warmup_, 1)));
  return base_ * 0.5 * (1.0 + std::cos(M_PI * progress));
}

}  // namespace shardtune::train
