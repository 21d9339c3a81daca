// The job's checkpoints, between the training loop and the checkpoint format: which checkpoint a
// start resumes, and saving. World rank 0 chooses the checkpoint and every rank loads that one;
// after loading, the ranks check that they all hold the same step. An explicit
// [checkpoint] resume = PATH is the starting point of the job's first start only: a requeued
// start (SLURM_RESTART_COUNT > 0) continues from the job's own newest checkpoint.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "checkpoint/manifest.h"
#include "common/job/job.h"
#include "runtime/dist/process_groups.h"
#include "runtime/fsdp/fsdp_llama.h"
#include "runtime/train/trainer.h"

namespace shardtune::runtime {

// The checkpoint a start resumes, or nullopt to start fresh. `restart_count`: Slurm's count of
// requeues of this job (0 outside Slurm). Runs on world rank 0 only.
std::optional<std::string> resume_checkpoint(const job::CheckpointSection& checkpoint, int64_t restart_count);

// With LoRA: the record adapter checkpoints carry (the adapters' shape and the base model's
// identity: its config.json and tensor index hashed, or for a random base its shape and seed).
// Opens the model folder. nullopt without LoRA.
std::optional<checkpoint::AdapterRecord> adapter_record(const job::Job& job, const std::string& model_config);

// Why adapters saved as `saved` cannot resume in a job whose adapters are `job` (empty: they can).
std::vector<std::string> adapter_mismatches(const checkpoint::AdapterRecord& saved, const checkpoint::AdapterRecord& job);

// Hooks for the Trainer over the job's checkpoint directory. `model_config`: the model's
// config.json text, recorded in every checkpoint. With LoRA,
// checkpoints hold only the adapters and record the base model, and resuming adapters trained on
// another base model (or of another shape) is refused. The references must outlive the hooks.
train::CheckpointHooks checkpoint_hooks(const job::Job& job, const std::string& model_config, fsdp::FsdpLlama& model,
                                        dist::ProcessGroups& groups, int64_t restart_count);

}  // namespace shardtune::runtime
