// Computing, storing and identifying the reference's log-probabilities of a dataset's pairs.
#include "runtime/train/reference_logps.h"

#include <ATen/ops/zeros.h>
#include <c10/core/ScalarType.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <filesystem>

#include "common/error.h"
#include "common/job/schema.h"
#include "runtime/data/mixed_dataset.h"
#include "runtime/data/preference_dataset.h"
#include "runtime/data/reference_logps_file.h"
#include "runtime/data/token_cache.h"
#include "runtime/dist/text_collectives.h"
#include "runtime/fsdp/fsdp_options.h"
#include "runtime/train/collate.h"
#include "runtime/train/evaluate.h"

namespace shardtune::train {
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

}  // namespace

std::vector<double> compute_reference_logps(const data::Dataset& pairs, const ReferenceLogps& reference,
                                            int64_t per_rank, dist::Communicator& world) {
  const int ranks = world.size(), rank = world.rank();
  const int64_t n = pairs.size();
  at::Tensor all = at::zeros({2 * n}, at::kDouble);
  double* out = all.data_ptr<double>();
  const int64_t batches = eval_batches(n, per_rank, ranks);
  for (int64_t b = 0; b < batches; ++b) {
    const std::vector<int64_t> mine = eval_rows(n, per_rank, b, rank, ranks);
    // A rank without pairs in this batch still takes part in the forward's collectives.
    const Batch batch = collate(pairs, mine.empty() ? std::vector<int64_t>{b * per_rank * ranks} : mine);
    const at::Tensor logps = reference(batch).to(at::kCPU, at::kDouble).contiguous();
    if (mine.empty()) continue;
    const int64_t p = batch.pairs;
    ST_CHECK(logps.numel() == 2 * p, common::ErrorKind::kInternal, "{} reference values for {} pairs", logps.numel(), p);
    const double* v = logps.data_ptr<double>();
    for (int64_t i = 0; i < p; ++i) {
      out[2 * mine[static_cast<size_t>(i)]] = v[i];
      out[2 * mine[static_cast<size_t>(i)] + 1] = v[p + i];
    }
  }
  world.all_reduce(all, dist::ReduceOp::kSum);  // each pair's values come from one rank, the others add 0
  return std::vector<double>(all.data_ptr<double>(), all.data_ptr<double>() + 2 * n);
}

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
  const at::ScalarType compute = fsdp::precision_from_job(job.train, job.fsdp, job.peft.adapters()).compute;
  return fmt::format("{}{}{}, computed in {}", base ? "the base of " : "", weights, nf4, c10::toString(compute));
}

// The tokens of the pairs, as their checksum: one file's, or those of a mixture's sources joined.
std::string pairs_tokens(const data::Dataset& pairs, const std::string& name) {
  if (const auto* file = dynamic_cast<const data::PreferenceDataset*>(&pairs))
    return fmt::format("{:016x}", file->tokens().checksum());
  const auto* mixed = dynamic_cast<const data::ConcatDataset*>(&pairs);
  ST_CHECK(mixed != nullptr, common::ErrorKind::kInternal, "DPO's {} data are not preference pairs", name);
  std::string out;
  for (size_t k = 0; k < mixed->parts(); ++k) out += (k ? "+" : "") + pairs_tokens(mixed->part(k), name);
  return out;
}

std::unique_ptr<data::Dataset> with_precomputed_reference(const data::Dataset& pairs, const std::string& name,
                                                          const std::string& dir, const std::string& identity,
                                                          const std::function<const ReferenceLogps&()>& compute,
                                                          int64_t per_rank, dist::Communicator& world,
                                                          const std::string& what) {
  const std::string key =
      fmt::format("pairs {} of tokens {}; reference {}", pairs.size(), pairs_tokens(pairs, name), identity);
  const std::string path = data::reference_logps_path(dir, name, key);
  // Every rank reads it (a shared file system), so all agree on whether to compute.
  std::optional<std::vector<double>> logps = data::read_reference_logps(path, key, pairs.size());
  if (dist::min_over(world, logps ? 1 : 0) == 1) {
    spdlog::info("{}: the reference's log-probabilities of the {} pairs from {}", what, name, path);
  } else {
    const auto start = std::chrono::steady_clock::now();
    logps = compute_reference_logps(pairs, compute(), per_rank, world);
    if (world.rank() == 0) data::write_reference_logps(path, key, *logps);
    world.barrier();
    spdlog::info("{}: computed the reference's log-probabilities of the {} {} pairs in {:.1f} s and stored them in {}",
                 what, pairs.size(), name,
                 std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), path);
  }
  return std::make_unique<data::WithReference>(pairs, std::move(*logps));
}

}  // namespace shardtune::train
