// The training loop: optimizer steps of sharded training over the data in its global order, as
// the run's schedule (run_schedule.h) lays them out from the sample cursor; validation after each
// epoch (loss and perplexity); a progress line on rank 0 and rank 0's metrics.jsonl. After each
// step the ranks agree on whether any of them was asked to stop (stop_request.h); if so they
// checkpoint together and return early. A step with a non-finite loss or gradient norm never
// updates the weights nor reaches a checkpoint ([train] on_nonfinite, nonfinite_guard.h).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/job/job.h"
#include "runtime/dist/process_groups.h"
#include "runtime/fsdp/optimizer.h"
#include "runtime/fsdp/fsdp_llama.h"
#include "runtime/model/llama_config.h"
#include "runtime/data/dataset.h"
#include "runtime/data/mixture.h"
#include "runtime/train/dpo.h"
#include "runtime/train/run_schedule.h"
#include "runtime/train/train_step.h"

namespace shardtune::train {

// Where a run continues: optimizer steps taken and the sample cursor of the next step.
struct ResumePoint {
  int64_t step = 0;
  Cursor cursor;
  double loss_scale = 0;        // fp16's dynamic loss scale; 0 when unused
  int64_t reference_batch = 0;  // the global batch the step-counted keys are counted in; 0: unknown
  bool validation_pending = false;  // the epoch that ended at the cursor has not been validated yet
};

// A checkpoint being written in the background while training goes on.
class SaveInFlight {
 public:
  virtual ~SaveInFlight() = default;  // waits for its writer; discards it unless committed
  virtual int64_t step() const = 0;
  // Returns once the shards and moments are copied: the optimizer may change them from then on.
  virtual void wait_for_copy() = 0;
  // Collective: whether every rank has written its part.
  virtual bool written() = 0;
  // Collective: waits for this rank's part, then commits; throws on every rank if any failed.
  virtual void commit() = 0;
};

// How the loop reaches checkpoints without depending on their format: `resume` loads the model's
// shards and the optimizer (if a checkpoint is to be resumed) and says where to continue; `save`
// writes one and commits it before returning. `start_save` ([checkpoint] async) begins one that
// is written in the background; it returns null when it had to save in the foreground instead.
// Any may be empty.
struct CheckpointHooks {
  std::function<std::optional<ResumePoint>(fsdp::Optimizer&)> resume;
  std::function<void(fsdp::Optimizer&, const ResumePoint&)> save;
  std::function<std::unique_ptr<SaveInFlight>(fsdp::Optimizer&, const ResumePoint&)> start_save;
  // For the update of a step a save follows: an observer that takes the save's checksums as the
  // optimizer writes each piece (checkpoint/update_crcs.h). May be empty.
  std::function<fsdp::Optimizer::PieceObserver(fsdp::Optimizer&)> watch_update;
};

struct TrainSummary {
  int64_t steps = 0;
  std::vector<double> losses;  // per optimizer step, averaged over ranks
  double last_val_loss = 0;    // 0 when validation did not run
  double tokens_per_second = 0;
  int stop_signal = 0;  // non-zero: the ranks stopped early on this signal, after a checkpoint
  double save_seconds = 0;  // training stood still for checkpoints: saves, and waits for those in flight
  // What a stop ahead of a time limit needs: the longest step and the longest save made in the
  // foreground (as a stop's is), in seconds, measured on this rank.
  double stop_needs_s = 0;
};

// What the loop takes from the job: its [train] and [metrics] sections, where metrics.jsonl goes,
// and how often to checkpoint.
struct TrainerOptions {
  job::TrainSection train;
  job::MetricsSection metrics;
  std::string output_dir;              // rank 0 appends metrics.jsonl here (when metrics.jsonl is on)
  int64_t checkpoint_every_steps = 0;  // 0: at the end only (and when asked to stop)
  model::LlamaConfig model_config;     // for the FLOPs of a step
  // Under Slurm, the seconds between its stop signal and the time limit ([slurm] signal_lead_s):
  // rank 0 warns once the steps and saves measured would not fit in it. 0: no check.
  double signal_lead_s = 0;
  // [train] objective = "dpo": the loss of the pairs, and their reference; null for SFT. Outlives the trainer.
  const PreferenceObjective* preference = nullptr;
  // How an epoch draws on the training data's sources (empty: the dataset alone, each epoch a
  // permutation of it), and where each source's validation part lies in the validation set (two
  // or more: each is evaluated on its own too).
  data::Mixture mixture;
  std::vector<data::MixtureSource> val_sources;
};

class Trainer {
 public:
  // `val` may be null. All ranks pass the same datasets.
  Trainer(TrainerOptions options, dist::ProcessGroups& groups, fsdp::FsdpLlama& model, const data::Dataset& train,
          const data::Dataset* val, CheckpointHooks hooks = {});
  ~Trainer();
  // Throws common::Error(kDiverged) when training diverges (see on_nonfinite).
  TrainSummary run();

 private:
  struct Run;      // the state of one run() call
  struct Outcome;  // what one step did
  void start(Run& run);
  void train_epoch(Run& run);
  Outcome take_step(Run& run, const StepSpan& span, const std::vector<int64_t>& permutation, class Prefetcher& prefetch);
  bool finish_step(Run& run, const StepSpan& span, Outcome& out);
  void save(Run& run, bool validation_pending, bool background);
  void check_signal_lead(Run& run);
  void settle_save(Run& run, const char* wait_for);
  void record_step(Run& run, const StepSpan& span, const Outcome& out);
  void log_progress(Run& run, const StepSpan& span, const StepResult& result);
  void validate_epoch(Run& run, int64_t epoch);

  const TrainerOptions options_;
  dist::ProcessGroups& groups_;
  fsdp::FsdpLlama& model_;
  const data::Dataset& train_;
  const data::Dataset* val_;
  CheckpointHooks hooks_;
};

}  // namespace shardtune::train
