// The run's schedule from the sample cursor.
#include "runtime/train/run_schedule.h"

#include <algorithm>
#include <cmath>

#include "common/error.h"

namespace shardtune::train {

RunSchedule::RunSchedule(const job::TrainSection& train, int64_t dataset_size, int64_t global_batch,
                         int64_t reference_batch)
    : kind_(train.lr_scheduler),
      base_lr_(train.lr),
      gamma_(train.gamma),
      dataset_size_(dataset_size),
      global_batch_(global_batch),
      reference_batch_(reference_batch > 0 ? reference_batch : global_batch) {
  ST_CHECK(global_batch > 0 && dataset_size >= global_batch, common::ErrorKind::kConfig,
           "the training data has {} samples, fewer than one global batch of {}", dataset_size, global_batch);
  end_ = dataset_size_ * train.num_epochs;
  if (train.max_train_step > 0) end_ = std::min(end_, reference_position(train.max_train_step));
  warmup_end_ = std::min(end_, reference_position(train.warmup_steps));
}

int64_t RunSchedule::reference_position(int64_t steps) const {
  // The reference run takes ceil(N / B) steps per epoch, the last one short.
  const int64_t per_epoch = (dataset_size_ + reference_batch_ - 1) / reference_batch_;
  return steps / per_epoch * dataset_size_ + steps % per_epoch * reference_batch_;
}

Cursor RunSchedule::normalized(Cursor c) const {
  if (c.sample >= dataset_size_) return {c.epoch + 1, 0};
  return c;
}

StepSpan RunSchedule::step_at(const Cursor& at) const {
  const Cursor c = normalized(at);
  ST_CHECK(!finished(c), common::ErrorKind::kInternal, "no step left at epoch {} sample {}", c.epoch, c.sample);
  const int64_t epoch_end = std::min(dataset_size_, end_ - c.epoch * dataset_size_);
  return {c.epoch, c.sample, std::min(c.sample + global_batch_, epoch_end)};
}

bool RunSchedule::ends_epoch(const StepSpan& s) const {
  return s.end == dataset_size_ || s.epoch * dataset_size_ + s.end == end_;
}

int64_t RunSchedule::steps_left(const Cursor& at) const {
  int64_t steps = 0;
  for (Cursor c = normalized(at); !finished(c); c = {c.epoch + 1, 0}) {
    const int64_t epoch_end = std::min(dataset_size_, end_ - c.epoch * dataset_size_);
    steps += (epoch_end - c.sample + global_batch_ - 1) / global_batch_;
  }
  return steps;
}

double RunSchedule::lr(const StepSpan& s) const {
  if (kind_ == job::LrScheduler::kStep) return base_lr_ * std::pow(gamma_, static_cast<double>(s.epoch));
  const int64_t before = s.epoch * dataset_size_ + s.begin, after = s.epoch * dataset_size_ + s.end;
  if (before < warmup_end_)
    return base_lr_ * std::min(1.0, static_cast<double>(after) / static_cast<double>(warmup_end_));
  const double progress = std::min(
      1.0, static_cast<double>(before - warmup_end_) / static_cast<double>(std::max<int64_t>(end_ - warmup_end_, 1)));
  return base_lr_ * 0.5 * (1.0 + std::cos(M_PI * progress));
}

}  // namespace shardtune::train
