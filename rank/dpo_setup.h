// A DPO job's objective on the rank ([train] objective = "dpo", docs/dpo.md): its losses and where
// its reference's log-probabilities come from: the policy with its adapters switched off, a frozen
// sharded copy of the starting weights, or a file of them computed once before training. Also
// what identifies the reference, which checkpoints record so that a resume against another
// reference is refused.
#pragma once

#include <memory>
#include <string>

#include "common/job/job.h"
#include "rank/sharded_model.h"
#include "runtime/data/job_data.h"
#include "runtime/train/dpo.h"

namespace shardtune::rank_program {

// The reference's weights in words that change whenever they do: the base's SHA-256 (LoRA on a
// pretrained base, `base_sha256`), a folder's files' identities (size, times, inode), or a preset's
// seeded initialisation; with the dtype its numbers are computed in.
std::string dpo_reference_identity(const job::Job& job, const std::string& base_sha256);

struct DpoSetup {
  train::PreferenceObjective objective;
  ShardedModel reference;  // reference = "model": the frozen copy; empty otherwise
  // reference = "precomputed": the job's datasets with each pair's two values; null otherwise.
  std::unique_ptr<data::Dataset> train, val;
};

// Collective. `policy` must outlive the result (reference = "base" runs it); `resuming`: a
// checkpoint will be loaded into it, so a full fine-tune's policy is no longer the reference and a
// missing precomputed file is computed by a frozen copy built for the purpose and released after.
DpoSetup set_up_dpo(const job::Job& job, const model::LlamaConfig& config, const dist::Topology& topo,
                    dist::ProcessGroups& groups, const at::Device& device, ShardedModel& policy,
                    const data::JobData& data, bool resuming);

}  // namespace shardtune::rank_program
