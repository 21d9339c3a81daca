// A DPO job's objective ([train] objective = "dpo", docs/dpo.md): its losses and where its
// reference's log-probabilities come from: the policy with its adapters switched off, a frozen
// sharded copy of the starting weights, or a file of them computed once before training.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "common/job/job.h"
#include "runtime/data/dataset.h"
#include "runtime/dist/communicator.h"
#include "runtime/fsdp/fsdp_llama.h"
#include "runtime/train/dpo.h"

namespace shardtune::train {

// A frozen sharded model, with what must live as long as it (its unsharded model).
struct FrozenModel {
  std::shared_ptr<void> keep;
  fsdp::FsdpLlama* sharded = nullptr;
};

struct DpoObjective {
  PreferenceObjective objective;
  FrozenModel reference;  // reference = "model": the frozen copy; empty otherwise
  // reference = "precomputed": the job's pairs with each pair's two values; null otherwise.
  std::unique_ptr<data::Dataset> train, val;
};

// Collective over `world`. `policy` must outlive the result (reference = "base" runs it);
// `base_sha256`: the identity of a LoRA job's pretrained base (dpo_reference_identity);
// `resuming`: a checkpoint will be loaded into the policy, so a full fine-tune's policy is no
// longer the reference and a missing precomputed file is computed by a frozen copy made by
// `frozen_copy` for the purpose and released after. `val` may be null.
DpoObjective dpo_objective(const job::Job& job, fsdp::FsdpLlama& policy, const std::string& base_sha256,
                           const data::Dataset& train, const data::Dataset* val, bool resuming,
                           const std::function<FrozenModel()>& frozen_copy, dist::Communicator& world);

}  // namespace shardtune::train
