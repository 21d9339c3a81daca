// The training loop: epochs over the data in the global order, optimizer steps of sharded
// training, the learning-rate schedule, validation after each epoch (loss and perplexity), and a
// progress line on rank 0 (step, loss, learning rate, tokens per second, time per step, ETA).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/job/job.h"
#include "runtime/dist/process_groups.h"
#include "runtime/fsdp/fsdp_llama.h"
#include "runtime/train/dataset.h"

namespace shardtune::train {

struct TrainSummary {
  int64_t steps = 0;
  std::vector<double> losses;  // per optimizer step, averaged over ranks
  double last_val_loss = 0;    // 0 when validation did not run
  double tokens_per_second = 0;
};

class Trainer {
 public:
  // `val` may be null. All ranks pass the same datasets.
  Trainer(const job::Job& job, dist::ProcessGroups& groups, fsdp::FsdpLlama& model, const Dataset& train,
          const Dataset* val);
  TrainSummary run();

 private:
  double validate();

  const job::Job& job_;
  dist::ProcessGroups& groups_;
  fsdp::FsdpLlama& model_;
  const Dataset& train_;
  const Dataset* val_;
};

}  // namespace shardtune::train
