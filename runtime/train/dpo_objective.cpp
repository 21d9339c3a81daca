// The DPO objective and its reference.
#include "runtime/train/dpo_objective.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <tuple>

#include "common/job/schema.h"
#include "runtime/train/reference_logps.h"

namespace shardtune::train {

DpoObjective dpo_objective(const job::Job& job, fsdp::FsdpLlama& policy, const std::string& base_sha256,
                           const data::Dataset& train, const data::Dataset* val, bool resuming,
                           const std::function<FrozenModel()>& frozen_copy, dist::Communicator& world) {
  DpoObjective d;
  d.objective.dpo = dpo_options(job.dpo);
  const std::string what =
      fmt::format("DPO ({}, beta {}{})", job::enum_name(job.dpo.loss_type), job.dpo.beta,
                  job.dpo.label_smoothing > 0 ? fmt::format(", label smoothing {}", job.dpo.label_smoothing) : "");
  const job::DpoReference mode = job::dpo_reference(job);
  if (mode == job::DpoReference::kBase) {
    d.objective.reference = reference_without_adapters(policy);
    spdlog::info("{}: the reference is the base model with the adapters switched off", what);
    return d;
  }
  if (mode == job::DpoReference::kModel) {
    d.reference = frozen_copy();
    d.objective.reference = reference_model(*d.reference.sharded);
    spdlog::info("{}: the reference is a frozen sharded copy", what);
    return d;
  }
  // Precomputed, where its file is missing, by the base without adapters, the policy itself while
  // it is still the starting weights, or else a frozen copy released once done.
  FrozenModel temporary;
  ReferenceLogps compute;
  const auto reference = [&]() -> const ReferenceLogps& {
    if (compute) return compute;
    if (job.peft.adapters()) {
      compute = reference_without_adapters(policy);
    } else if (!resuming && job.dpo.reference_model.empty()) {
      compute = reference_model(policy);
    } else {
      temporary = frozen_copy();
      compute = reference_model(*temporary.sharded);
    }
    return compute;
  };
  const std::string identity = dpo_reference_identity(job, base_sha256);
  const std::string dir = job.job.output_dir + "/reference-logps";
  for (auto [pairs, name, out] : {std::tuple{&train, "training", &d.train}, std::tuple{val, "validation", &d.val}})
    if (pairs != nullptr)
      *out = with_precomputed_reference(*pairs, name, dir, identity, reference, job.train.val_batch_size, world, what);
  spdlog::info("{}: the reference is precomputed ({}); training runs no reference model", what, identity);
  return d;
}

}  // namespace shardtune::train
