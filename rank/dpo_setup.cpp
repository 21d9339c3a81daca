// The DPO objective and its reference.
#include "rank/dpo_setup.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <vector>

#include "common/error.h"
#include "common/job/schema.h"
#include "runtime/data/preference_dataset.h"
#include "runtime/data/reference_logps_file.h"
#include "runtime/data/token_cache.h"
#include "runtime/dist/text_collectives.h"
#include "runtime/fsdp/fsdp_options.h"
#include "runtime/train/reference_logps.h"

namespace shardtune::rank_program {
namespace {

namespace fs = std::filesystem;

// The identities of a Hugging Face folder's config and weight files.
std::string folder_identity(const std::string& folder) {
  std::vector<std::string> files;
  for (const auto& e : fs::directory_iterator(folder)) {
    const std::string name = e.path().filename().string();
    if (name == "config.json" || e.path().extension() == ".safetensors") files.push_back(e.path().string());
  }
  std::sort(files.begin(), files.end());
  std::string out;
  for (const std::string& f : files) out += (out.empty() ? "" : ", ") + data::data_file_stamp(f);
  return out;
}

std::string compute_dtype(const job::Job& job) {
  return c10::toString(fsdp::precision_from_job(job.train, job.fsdp, job.peft.adapters()).compute);
}

}  // namespace

std::string dpo_reference_identity(const job::Job& job, const std::string& base_sha256) {
  const job::DpoReference mode = job::dpo_reference(job);
  const bool base = mode == job::DpoReference::kBase || (mode == job::DpoReference::kPrecomputed && job.peft.adapters());
  const std::string path = !base && !job.dpo.reference_model.empty() ? job.dpo.reference_model : job.model.path;
  std::string weights;
  if (path.empty() || (job.dpo.reference_model.empty() && job.model.init == job::ModelInit::kRandom)) {
    weights = fmt::format("{} initialised at random with seed {}",
                          path.empty() ? fmt::format("the {} preset", job::enum_name(job.model.preset)) : path,
                          job.train.seed);
  } else if (base && !base_sha256.empty()) {
    weights = fmt::format("{} (SHA-256 {})", path, base_sha256);
  } else {
    weights = fmt::format("{} ({})", path, folder_identity(path));
  }
  const std::string nf4 = job.peft.method == job::PeftMethod::kQlora
                              ? fmt::format(", block projections in NF4 (blocks of {}{})", job.peft.nf4_block_size,
                                            job.peft.nf4_double_quant ? ", double-quantised" : "")
                              : "";
  return fmt::format("{}{}{}, computed in {}", base ? "the base of " : "", weights, nf4, compute_dtype(job));
}

DpoSetup set_up_dpo(const job::Job& job, const model::LlamaConfig& config, const dist::Topology& topo,
                    dist::ProcessGroups& groups, const at::Device& device, ShardedModel& policy,
                    const data::JobData& data, bool resuming) {
  DpoSetup s;
  s.objective.dpo = train::dpo_options(job.dpo);
  const std::string what = fmt::format("DPO ({}, beta {}{})", job::enum_name(job.dpo.loss_type), job.dpo.beta,
                                       job.dpo.label_smoothing > 0
                                           ? fmt::format(", label smoothing {}", job.dpo.label_smoothing)
                                           : "");
  switch (job::dpo_reference(job)) {
    case job::DpoReference::kBase:
      s.objective.reference = train::reference_without_adapters(*policy.sharded);
      spdlog::info("{}: the reference is the base model with the adapters switched off", what);
      return s;
    case job::DpoReference::kModel:
      s.reference = build_reference_model(job, config, topo, groups, device);
      s.objective.reference = train::reference_model(*s.reference.sharded);
      spdlog::info("{}: the reference is a frozen sharded copy", what);
      return s;
    default:
      break;
  }
  // Precomputed: the file of each dataset, made now where it is missing. What computes them: the
  // base without adapters; the policy itself while it is still the starting weights; else a frozen
  // copy, released once done.
  const std::string identity = dpo_reference_identity(job, policy.weights_sha256);
  const std::string dir = job.job.output_dir + "/reference-logps";
  ShardedModel temporary;
  train::ReferenceLogps compute;
  auto reference = [&]() -> const train::ReferenceLogps& {
    if (compute) return compute;
    if (job.peft.adapters()) {
      compute = train::reference_without_adapters(*policy.sharded);
    } else if (!resuming && job.dpo.reference_model.empty()) {
      compute = train::reference_model(*policy.sharded);
    } else {
      temporary = build_reference_model(job, config, topo, groups, device);
      compute = train::reference_model(*temporary.sharded);
    }
    return compute;
  };
  auto with_reference = [&](const data::Dataset* pairs, const char* name) -> std::unique_ptr<data::Dataset> {
    if (pairs == nullptr) return nullptr;
    const auto* file = dynamic_cast<const data::PreferenceDataset*>(pairs);
    ST_CHECK(file != nullptr, common::ErrorKind::kInternal, "DPO's {} data are not preference pairs", name);
    const std::string key = fmt::format("pairs {} of tokens {:016x}; reference {}", pairs->size(),
                                        file->tokens().checksum(), identity);
    const std::string path = data::reference_logps_path(dir, name, key);
    // Every rank reads it (a shared file system), so all agree on whether to compute.
    std::optional<std::vector<double>> logps = data::read_reference_logps(path, key, pairs->size());
    const bool everywhere = dist::min_over(*groups.world, logps ? 1 : 0) == 1;
    if (everywhere) {
      spdlog::info("{}: the reference's log-probabilities of the {} pairs from {}", what, name, path);
    } else {
      const auto start = std::chrono::steady_clock::now();
      logps = train::compute_reference_logps(*pairs, reference(), job.train.val_batch_size, *groups.world);
      if (groups.world->rank() == 0) data::write_reference_logps(path, key, *logps);
      groups.world->barrier();
      spdlog::info("{}: computed the reference's log-probabilities of the {} {} pairs in {:.1f} s and stored them in "
                   "{}",
                   what, pairs->size(), name,
                   std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), path);
    }
    return std::make_unique<data::WithReference>(*pairs, std::move(*logps));
  };
  s.train = with_reference(data.train.get(), "training");
  s.val = with_reference(data.val.get(), "validation");
  spdlog::info("{}: the reference is precomputed ({}); training runs no reference model", what, identity);
  return s;
}

}  // namespace shardtune::rank_program
