// The job's checkpoints, between the training loop and the checkpoint format: which checkpoint a
// start resumes, and saving. World rank 0 chooses and every rank loads the same one.
// - resume = "auto" (and any requeued start, SLURM_RESTART_COUNT > 0, that has checkpoints of its
//   own) tries the job's committed checkpoints newest first: one that does not load (a damaged
//   file, a failed checksum, a broken manifest) is skipped, named in the log with the reason, and
//   the next older one is tried. Once one loads, the skipped ones are renamed <dir>.damaged-<time>
//   and kept: nothing is deleted. When none loads, nothing is touched and the start fails naming each.
// - An explicit [checkpoint] resume = PATH is the starting point of the job's first start only; it
//   is loaded or the start fails.
// - Adapters resume only on the base model and with the shape they were trained with: that is the
//   job's choice to fix, never a reason to fall back.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "checkpoint/manifest.h"
#include "common/job/job.h"
#include "runtime/dist/process_groups.h"
#include "runtime/fsdp/fsdp_llama.h"
#include "runtime/train/trainer.h"

namespace shardtune::rank_program {

// The checkpoints a start may resume, in the order to try them; empty: start fresh.
// `restart_count`: Slurm's count of requeues of this job (0 outside Slurm). Runs on world rank 0.
std::vector<std::string> resume_candidates(const job::CheckpointSection& checkpoint, int64_t restart_count);

// Whether this start will resume a checkpoint (world rank 0 lists them): a full fine-tune then
// takes every weight from it and reads none of the base. Collective over `world`.
bool will_resume(const job::Job& job, dist::Communicator& world, int64_t restart_count);

// With LoRA: the record adapter checkpoints carry (the adapters' shape and the base model's
// identity, base_identity.h; for a random base, its shape and seed). `weights_sha256`: the digest of
// every byte of the base's weights, taken on world rank 0 as they were loaded. Decided on world
// rank 0. nullopt without LoRA.
std::optional<checkpoint::AdapterRecord> adapter_record(const job::Job& job, const std::string& model_config,
                                                        dist::Communicator& world, const std::string& weights_sha256);

// Why adapters saved as `saved` cannot resume in a job whose adapters are `job` (empty: they can).
std::vector<std::string> adapter_mismatches(const checkpoint::AdapterRecord& saved, const checkpoint::AdapterRecord& job);

// Hooks for the Trainer over the job's checkpoint directory. `model_config`: the model's
// config.json text, recorded in every checkpoint. With LoRA (`adapter`), checkpoints hold only the
// adapters and record the base model. `data`: what the job trains on (JobData::identity), recorded
// in every checkpoint; a resume of a checkpoint of other data is refused, or starts a new
// schedule ([checkpoint] on_data_change). The references must outlive the hooks.
train::CheckpointHooks checkpoint_hooks(const job::Job& job, const std::string& model_config, fsdp::FsdpLlama& model,
                                        dist::ProcessGroups& groups, int64_t restart_count,
                                        std::optional<checkpoint::AdapterRecord> adapter,
                                        checkpoint::DataIdentity data);

}  // namespace shardtune::rank_program
