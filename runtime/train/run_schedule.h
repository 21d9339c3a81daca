// What follows from where a run stands in its data. The global sample cursor (epoch, position in
// that epoch's global order) is the run's only clock: the steps left, each step's samples, epoch
// ends, the run's end and the learning rate are functions of the cursor and the current global
// batch. So a run stopped anywhere and resumed at any world size trains every sample of every
// epoch exactly once and ends its schedule at the last sample, as one straight run would.
//
// - A step takes the next `global_batch` samples of its epoch, or fewer at the epoch's end: the
//   last step of an epoch trains the samples left, so no sample is dropped at any batch size.
// - The keys counted in steps (warmup_steps, max_train_step) mean the sample positions that the
//   job's reference batch reaches after that many steps: the global batch of the job's first
//   start, recorded in every checkpoint. At that batch size they are plain step counts; at another
//   they keep the same samples.
// - Cosine: warmup raises the rate linearly with the samples trained once the step is taken (the
//   first step already trains at lr / warmup); after it the rate follows the cosine of the share
//   of the post-warmup samples trained before the step, from lr down to 0 at the run's last sample.
//   StepLR: lr x gamma^epoch. Pure, no I/O.
#pragma once

#include <cstdint>

#include "common/job/job.h"

namespace shardtune::train {

// Where the next step starts: an epoch (from 0) and the samples of its global order already trained.
struct Cursor {
  int64_t epoch = 0;
  int64_t sample = 0;
  bool operator==(const Cursor&) const = default;
};

// One optimizer step's samples: positions [begin, end) of epoch `epoch`'s global order.
struct StepSpan {
  int64_t epoch = 0;
  int64_t begin = 0;
  int64_t end = 0;
  int64_t size() const { return end - begin; }
};

class RunSchedule {
 public:
  // `reference_batch`: the global batch the step-counted keys are counted in (0: `global_batch`).
  RunSchedule(const job::TrainSection& train, int64_t dataset_size, int64_t global_batch, int64_t reference_batch = 0);

  int64_t dataset_size() const { return dataset_size_; }
  int64_t global_batch() const { return global_batch_; }
  int64_t reference_batch() const { return reference_batch_; }
  // Samples of the whole run, over every epoch (its end as a global position).
  int64_t end() const { return end_; }
  int64_t position(const Cursor& c) const { return c.epoch * dataset_size_ + c.sample; }

  // A cursor at an epoch's last sample moves to the next epoch's first.
  Cursor normalized(Cursor c) const;
  bool finished(const Cursor& c) const { return position(normalized(c)) >= end_; }
  // The step that starts at `c`; `c` must not be finished.
  StepSpan step_at(const Cursor& c) const;
  Cursor after(const StepSpan& s) const { return normalized({s.epoch, s.end}); }
  // The step finishes its epoch (or the run, if that ends inside an epoch): validation follows it.
  bool ends_epoch(const StepSpan& s) const;
  // Optimizer steps from `c` to the end at this global batch.
  int64_t steps_left(const Cursor& c) const;
  double lr(const StepSpan& s) const;

 private:
  // The global position the reference batch reaches after `steps` steps.
  int64_t reference_position(int64_t steps) const;

  job::LrScheduler kind_;
  double base_lr_, gamma_;
  int64_t dataset_size_, global_batch_, reference_batch_;
  int64_t warmup_end_;  // global position where warmup ends (0: none)
  int64_t end_;
};

}  // namespace shardtune::train
