// The job's checkpoints, between the training loop and the checkpoint format: the adapters' record,
// and the trainer's hooks that resume (checkpoint/resume.h) and save.
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

// With LoRA: the record adapter checkpoints carry (the adapters' shape and the base model's
// identity, base_identity.h; for a random base, its shape and seed). `weights_sha256`: the digest of
// every byte of the base's weights, taken on world rank 0 as they were loaded. Decided on world
// rank 0. nullopt without LoRA.
std::optional<checkpoint::AdapterRecord> adapter_record(const job::Job& job, const std::string& model_config,
                                                        dist::Communicator& world, const std::string& weights_sha256);

// Hooks for the Trainer over the job's checkpoint directory. `model_config`: the model's
// config.json text, recorded in every checkpoint. With LoRA (`adapter`), checkpoints hold only the
// adapters and record the base model. `data`: what the job trains on (JobData::identity), recorded
// in every checkpoint; a resume of a checkpoint of other data is refused, or starts a new
// schedule ([checkpoint] on_data_change). The references must outlive the hooks.
train::CheckpointHooks checkpoint_hooks(const job::Job& job, const std::string& model_config, fsdp::FsdpLlama& model,
                                        dist::ProcessGroups& groups, int64_t restart_count,
                                        std::optional<checkpoint::AdapterRecord> adapter,
                                        data::DataIdentity data);

}  // namespace shardtune::rank_program
