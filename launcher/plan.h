// `shardtune plan JOB.toml [--gpu-memory 80GiB]`: the memory plan in words, whether the job fits
// the memory of one rank's device, and, when it does not, the smallest changes to the job that
// make it fit (each as the --set overrides that make it).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "common/job/job.h"
#include "launcher/memory_plan.h"

namespace shardtune::launcher {

struct FitChange {
  std::string what;                    // "activation checkpointing"
  std::vector<std::string> overrides;  // {"fsdp.activation_checkpointing=true"}
  double total_bytes = 0;              // per rank, with the change
};

// Single changes that bring the plan within `limit_bytes`, fewest-bytes first; when none does,
// pairs of them.
std::vector<FitChange> changes_that_fit(const job::Job& job, const model::LlamaConfig& config, double limit_bytes);

// The most blocks that can keep their activations (fsdp.uncheckpointed_blocks, with activation
// checkpointing on) in a plan within `limit_bytes`; nullopt when not even none can.
std::optional<int64_t> most_uncheckpointed_blocks(const job::Job& job, const model::LlamaConfig& config,
                                                  double limit_bytes);

// For a job with activation checkpointing: a line naming the most blocks that could keep their
// activations within 90% of `limit_bytes`, and the --set that does it; empty when no more than now.
std::string faster_that_fits(const job::Job& job, const model::LlamaConfig& config, double limit_bytes);

// "80GiB", "80 GB", "81920MiB", "1.5TiB" → bytes (GB and GiB both read as binary units, as
// nvidia-smi's figures are). nullopt when it is not a size.
std::optional<double> parse_memory_size(const std::string& text);

// The host memory of one node, which a CPU job's ranks on it share.
struct NodeMemory {
  double bytes = 0;
  std::string whose;   // "this machine's", "--node-memory's"
  std::string note;    // after the figure: " (MemTotal)"
};

// What a CPU job's ranks on one node hold at once at their largest: ranks per node x the larger of
// a rank's training peak and its loading. 0 for a GPU job (its ranks' memory is the GPUs').
double node_host_bytes(const MemoryPlan& plan);

// The report `shardtune plan` prints. `limit_bytes`: the device's memory per rank, when known;
// `node`: a node's host memory, against which a CPU job's ranks are checked.
std::string plan_report(const job::Job& job, const model::LlamaConfig& config, std::optional<double> limit_bytes,
                        const std::optional<NodeMemory>& node = std::nullopt);

// The report as JSON (parts, totals, limit, fits, changes; a CPU job's node memory and whether
// its ranks fit it), for scripts.
std::string plan_json(const job::Job& job, const model::LlamaConfig& config, std::optional<double> limit_bytes,
                      const std::optional<NodeMemory>& node = std::nullopt);

}  // namespace shardtune::launcher
