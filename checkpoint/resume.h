// Which checkpoint a start resumes, and loading it: world rank 0 chooses and every rank loads the
// same one.
// - resume = "auto" (and any requeued start, SLURM_RESTART_COUNT > 0, that has checkpoints of its
//   own) tries the job's committed checkpoints newest first: one that does not load (a damaged
//   file, a failed checksum, a broken manifest) is skipped, named in the log with the reason, and
//   the next older one is tried. Once one loads, the skipped ones are renamed <dir>.damaged-<time>
//   and kept: nothing is deleted. When none loads, nothing is touched and the start fails naming each.
// - An explicit [checkpoint] resume = PATH is the starting point of the job's first start only; it
//   is loaded or the start fails.
// - Adapters resume only on the base model and with the shape they were trained with, and a
//   checkpoint of other data only with on_data_change = "new_schedule": those are the job's to
//   fix, never a reason to fall back.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "checkpoint/manifest.h"
#include "checkpoint/sharded_checkpoint.h"
#include "common/job/job.h"
#include "runtime/data/data_identity.h"
#include "runtime/dist/communicator.h"
#include "runtime/fsdp/optimizer.h"
#include "runtime/fsdp/fsdp_llama.h"

namespace shardtune::checkpoint {

// The checkpoints a start may resume, in the order to try them; empty: start fresh.
// `restart_count`: Slurm's count of requeues of this job (0 outside Slurm). Runs on world rank 0.
// With resume = "none" or a path, the first start (restart_count 0) records in kRunBaseFile the
// newest commit number under the directory, and a requeue resumes only checkpoints committed past
// it (the run's own), else starts as the first start did: neither training over again from the
// start nor resuming another run's checkpoint.
inline constexpr const char* kRunBaseFile = "run-base";
std::vector<std::string> resume_candidates(const job::CheckpointSection& checkpoint, int64_t restart_count);

// Whether this start will resume a checkpoint (world rank 0 lists them): a full fine-tune then
// takes every weight from it and reads none of the base. Collective over `world`.
bool will_resume(const job::CheckpointSection& checkpoint, dist::Communicator& world, int64_t restart_count);

// Why adapters saved as `saved` cannot resume in a job whose adapters are `job` (empty: they can).
std::vector<std::string> adapter_mismatches(const AdapterRecord& saved, const AdapterRecord& job);

// What a start resumes against.
struct ResumeRequest {
  job::CheckpointSection checkpoint;  // dir, resume, on_data_change
  int64_t restart_count = 0;
  bool saves_optimizer = false;         // [fsdp] save_optimizer: a checkpoint without moments is noted
  std::optional<AdapterRecord> adapter;  // LoRA: the job's adapters and base
  data::DataIdentity data;               // what the job trains on
};

// Collective over `world`: loads the checkpoint to resume into `model` and `optimizer`, on every
// rank, and returns its training state; nullopt when there is none (a fresh start). A checkpoint of
// other data started as a new schedule has its step, cursor, reference batch and pending validation
// zeroed. Throws the same common::Error on every rank when no checkpoint loads.
std::optional<TrainingState> resume(const ResumeRequest& request, fsdp::FsdpLlama& model, fsdp::Optimizer& optimizer,
                                    dist::Communicator& world);

}  // namespace shardtune::checkpoint
