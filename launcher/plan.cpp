// The planner's report and the changes that make a job fit.
#include "launcher/plan.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <functional>

#include "common/job/schema.h"

namespace shardtune::launcher {
namespace {

// Faster settings are suggested only within this share of the device's memory: the plan leaves out
// the caching allocator's slack.
constexpr double kFasterShare = 0.9;

std::string gib(double bytes) { return fmt::format("{:.2f} GiB", bytes / (1 << 30)); }

std::string count(double n) { return n >= 1e9 ? fmt::format("{:.2f}B", n / 1e9) : fmt::format("{:.2f}M", n / 1e6); }

struct Candidate {
  std::string what;
  std::vector<std::string> overrides;
  std::function<void(job::Job&)> apply;
};

}  // namespace

std::optional<int64_t> most_uncheckpointed_blocks(const job::Job& job, const model::LlamaConfig& config,
                                                  double limit_bytes) {
  job::Job changed = job;
  changed.fsdp.activation_checkpointing = true;
  for (int64_t kept = config.num_hidden_layers; kept >= 0; --kept) {
    changed.fsdp.uncheckpointed_blocks = kept;
    if (plan_memory(changed, config).total_bytes <= limit_bytes) return kept;
  }
  return std::nullopt;
}

std::string faster_that_fits(const job::Job& job, const model::LlamaConfig& config, double limit_bytes) {
  if (!job.fsdp.activation_checkpointing) return "";
  const std::optional<int64_t> most = most_uncheckpointed_blocks(job, config, kFasterShare * limit_bytes);
  if (!most || *most <= job.fsdp.uncheckpointed_blocks) return "";
  job::Job changed = job;
  changed.fsdp.uncheckpointed_blocks = *most;
  const std::string bytes = gib(plan_memory(changed, config).total_bytes);
  const int64_t layers = config.num_hidden_layers;
  const std::string what = *most == layers ? fmt::format("no activation checkpointing, {}", bytes)
                                           : fmt::format("the last {} of {} blocks keeping their activations, {}",
                                                         *most, layers, bytes);
  const std::string set = *most == layers ? "fsdp.activation_checkpointing=false"
                                          : fmt::format("fsdp.uncheckpointed_blocks={}", *most);
  return fmt::format("faster, within {:.0f}% of it: {} (--set {})\n", 100 * kFasterShare, what, set);
}

namespace {

// Activation checkpointing of as few blocks as fit `limit_bytes` (all of them where none fits:
// another change may make room), from a job without it or with more blocks exempt than fit.
std::optional<Candidate> checkpointing_candidate(const job::Job& job, const model::LlamaConfig& config,
                                                 double limit_bytes) {
  const int64_t layers = config.num_hidden_layers;
  const int64_t now = job.fsdp.activation_checkpointing ? job.fsdp.uncheckpointed_blocks : layers;
  if (now == 0) return std::nullopt;
  const int64_t kept = std::min(most_uncheckpointed_blocks(job, config, limit_bytes).value_or(0), now - 1);
  const bool on = job.fsdp.activation_checkpointing;
  Candidate c{kept > 0  ? fmt::format("activation checkpointing of the first {} of {} blocks", layers - kept, layers)
              : on      ? "activation checkpointing of every block"
                        : "activation checkpointing",
              {},
              [kept](job::Job& j) {
                j.fsdp.activation_checkpointing = true;
                j.fsdp.uncheckpointed_blocks = kept;
              }};
  if (!on) c.overrides.push_back("fsdp.activation_checkpointing=true");
  if (on || kept > 0) c.overrides.push_back(fmt::format("fsdp.uncheckpointed_blocks={}", kept));
  return c;
}

// The single changes worth trying on this job, in the order a user would reach for them.
std::vector<Candidate> candidates(const job::Job& job, const model::LlamaConfig& config, double limit_bytes) {
  std::vector<Candidate> out;
  const job::TrainSection& t = job.train;
  if (std::optional<Candidate> c = checkpointing_candidate(job, config, limit_bytes)) out.push_back(std::move(*c));
  for (int64_t b = t.batch_size_training / 2; b >= 1; b /= 2) {
    const int64_t accumulation = t.gradient_accumulation_steps * (t.batch_size_training / b);
    out.push_back({fmt::format("micro-batch {} with {} accumulation steps (the same global batch)", b, accumulation),
                   {fmt::format("train.batch_size_training={}", b),
                    fmt::format("train.gradient_accumulation_steps={}", accumulation)},
                   [b, accumulation](job::Job& j) {
                     j.train.batch_size_training = b;
                     j.train.gradient_accumulation_steps = accumulation;
                   }});
  }
  const auto strategy = job.fsdp.sharding_strategy;
  if (strategy == job::ShardingStrategy::kShardGradOp || strategy == job::ShardingStrategy::kNoShard)
    out.push_back({"FULL_SHARD (gather each unit again for backward)", {"fsdp.sharding_strategy=FULL_SHARD"},
                   [](job::Job& j) { j.fsdp.sharding_strategy = job::ShardingStrategy::kFullShard; }});
  if (strategy == job::ShardingStrategy::kHybridShard) {
    const int64_t world = job.slurm.world_size();
    for (int64_t size = job::shard_group_size(job) * 2; size <= world; size *= 2)
      if (world % size == 0)
        out.push_back({fmt::format("HSDP shard groups of {} ranks", size), {fmt::format("fsdp.hsdp_shard_size={}", size)},
                       [size](job::Job& j) { j.fsdp.hsdp_shard_size = size; }});
  }
  if (!t.pure_bf16 && !t.use_fp16)
    out.push_back({"pure_bf16 (bf16 parameters and optimizer states)", {"train.pure_bf16=true"},
                   [](job::Job& j) { j.train.pure_bf16 = true; }});
  if (t.optimizer == job::Optimizer::kAdamW)
    out.push_back({"AdamW with 8-bit moments (block-wise, 2.03 bytes per trainable parameter)",
                   {"train.optimizer=adamw_8bit"}, [](job::Job& j) { j.train.optimizer = job::Optimizer::kAdamW8bit; }});
  if (t.optimizer != job::Optimizer::kAdafactor)
    out.push_back({"Adafactor (each matrix's row and column means instead of a second moment per parameter)",
                   {"train.optimizer=adafactor"}, [](job::Job& j) { j.train.optimizer = job::Optimizer::kAdafactor; }});
  if (!job.fsdp.cpu_offload)
    out.push_back({"CPU offload (trainable shards, gradients and optimizer state in host memory)",
                   {"fsdp.cpu_offload=true"}, [](job::Job& j) { j.fsdp.cpu_offload = true; }});
  if (job.peft.adapters() && !job.fsdp.offload_params)
    out.push_back({"CPU offload of the frozen base too", {"fsdp.cpu_offload=true", "fsdp.offload_params=true"},
                   [](job::Job& j) { j.fsdp.cpu_offload = j.fsdp.offload_params = true; }});
  if (job.peft.method == job::PeftMethod::kNone && !t.freeze_layers)
    out.push_back({"LoRA (the base frozen; adapters on q_proj and v_proj, r = 8)", {"peft.method=lora"},
                   [](job::Job& j) { j.peft.method = job::PeftMethod::kLora; }});
  if (job.peft.method != job::PeftMethod::kQlora && !t.freeze_layers)
    out.push_back({"QLoRA (the base's projections in 4-bit NF4, frozen; adapters as LoRA's)", {"peft.method=qlora"},
                   [](job::Job& j) { j.peft.method = job::PeftMethod::kQlora; }});
  if (strategy == job::ShardingStrategy::kFullShard || strategy == job::ShardingStrategy::kShardGradOp)
    for (int64_t factor : {2, 4, 8})
      out.push_back({fmt::format("{} nodes (sharding over {} ranks)", job.slurm.nodes * factor, job.slurm.world_size() * factor),
                     {fmt::format("slurm.nodes={}", job.slurm.nodes * factor)},
                     [factor](job::Job& j) { j.slurm.nodes *= factor; }});
  return out;
}

}  // namespace

std::vector<FitChange> changes_that_fit(const job::Job& job, const model::LlamaConfig& config, double limit_bytes) {
  const std::vector<Candidate> all = candidates(job, config, limit_bytes);
  std::vector<FitChange> fit;
  auto try_change = [&](const std::vector<const Candidate*>& picked) {
    job::Job changed = job;
    FitChange change;
    for (const Candidate* c : picked) {
      c->apply(changed);
      change.what += (change.what.empty() ? "" : " + ") + c->what;
      change.overrides.insert(change.overrides.end(), c->overrides.begin(), c->overrides.end());
    }
    change.total_bytes = plan_memory(changed, config).total_bytes;
    if (change.total_bytes <= limit_bytes) fit.push_back(std::move(change));
  };
  // A kind of change counts once: the first (smallest) micro-batch, node count or group size that fits.
  auto kind = [](const std::string& what) { return what.substr(0, what.find_first_of("0123456789(")); };
  std::vector<std::string> kinds_that_fit;
  for (const Candidate& c : all) {
    if (std::find(kinds_that_fit.begin(), kinds_that_fit.end(), kind(c.what)) != kinds_that_fit.end()) continue;
    const size_t before = fit.size();
    try_change({&c});
    if (fit.size() > before) kinds_that_fit.push_back(kind(c.what));
  }
  if (fit.empty())
    for (size_t i = 0; i < all.size() && fit.size() < 6; ++i)
      for (size_t k = i + 1; k < all.size() && fit.size() < 6; ++k)
        if (kind(all[i].what) != kind(all[k].what)) try_change({&all[i], &all[k]});
  return fit;
}

double node_host_bytes(const MemoryPlan& plan) {
  const double ranks = static_cast<double>(plan.ranks_per_node);
  if (plan.cuda)
    return plan.offload_bytes > 0
               ? ranks * std::max(plan.offload_bytes + plan.checkpoint_copy_bytes, plan.loading_bytes)
               : 0;
  return ranks * std::max(plan.total_bytes, plan.loading_bytes);
}

namespace {

// "host memory of a node: 4 rank(s) x 5.98 GiB = 23.92 GiB, of this machine's 23.44 GiB (MemTotal):
// does not fit"
std::string node_line(const MemoryPlan& plan, const NodeMemory& node) {
  const double need = node_host_bytes(plan);
  return fmt::format("host memory of a node: {} rank(s) x {} = {}, of {} {}{}: {}\n", plan.ranks_per_node,
                     gib(need / static_cast<double>(plan.ranks_per_node)), gib(need), node.whose, gib(node.bytes),
                     node.note,
                     need <= node.bytes ? fmt::format("fits ({:.0f}%)", 100 * need / node.bytes) : "does not fit");
}

}  // namespace

std::optional<double> parse_memory_size(const std::string& text) {
  size_t pos = 0;
  double value = 0;
  try {
    value = std::stod(text, &pos);
  } catch (const std::exception&) {
    return std::nullopt;
  }
  std::string unit = text.substr(pos);
  unit.erase(std::remove_if(unit.begin(), unit.end(), [](unsigned char c) { return std::isspace(c); }), unit.end());
  std::transform(unit.begin(), unit.end(), unit.begin(), [](unsigned char c) { return std::tolower(c); });
  const std::pair<const char*, double> units[] = {
      {"tib", 1099511627776.0}, {"tb", 1099511627776.0}, {"t", 1099511627776.0}, {"gib", 1073741824.0},
      {"gb", 1073741824.0},     {"g", 1073741824.0},     {"mib", 1048576.0},    {"mb", 1048576.0},
      {"m", 1048576.0},
  };
  for (const auto& [name, scale] : units)
    if (unit == name && value > 0 && std::isfinite(value)) return value * scale;
  return std::nullopt;
}

std::string plan_report(const job::Job& job, const model::LlamaConfig& config, std::optional<double> limit_bytes,
                        const std::optional<NodeMemory>& node) {
  const MemoryPlan plan = plan_memory(job, config);
  std::string out = fmt::format(
      "plan for {}: {} parameters ({} trainable), {} block(s); {} rank(s), {} over {}; micro-batch {} "
      "x {} tokens, activation checkpointing {}\n",
      job.job.name, count(plan.parameters), count(plan.trainable), config.num_hidden_layers, plan.world,
      job::enum_name(job.fsdp.sharding_strategy), plan.shard_size, job.train.batch_size_training,
      job.train.context_length, job.fsdp.activation_checkpointing ? "on" : "off");
  out += fmt::format("per rank, {} at the training peak:\n", plan.cuda ? "GPU memory" : "host memory (RSS)");
  for (const MemoryPart& p : plan.parts) out += fmt::format("  {:<20} {:>12}   {}\n", p.name, gib(p.bytes), p.detail);
  out += fmt::format("  {:<20} {:>12}\n", "total", gib(plan.total_bytes));
  if (plan.cuda) out += "  (the CUDA context, about 0.5 GiB, and the caching allocator's slack come on top)\n";
  out += fmt::format("host memory per rank while loading: {} ({})\n", gib(plan.loading_bytes), plan.loading_detail);
  if (plan.checkpoint_copy_bytes > 0)
    out += fmt::format("host memory per rank for checkpoints written in the background: {} (pinned)\n",
                       gib(plan.checkpoint_copy_bytes));
  if (plan.offload_bytes > 0) {
    out += fmt::format("host memory per rank for cpu_offload: {} (pinned: shards, gradients, optimizer state)\n",
                       gib(plan.offload_bytes));
    if (node) out += node_line(plan, *node);
  }
  if (!plan.cuda && node) {
    out += node_line(plan, *node);
    if (!limit_bytes) {
      if (node_host_bytes(plan) <= node->bytes) return out;
      limit_bytes = node->bytes / static_cast<double>(plan.ranks_per_node);  // a rank's share of the node
    }
  }
  if (!limit_bytes) {
    if (plan.cuda) out += "give --gpu-memory (e.g. 80GiB) to check that it fits\n";
    return out;
  }
  if (plan.total_bytes <= *limit_bytes) {
    out += fmt::format("fits: {} of {} per rank ({:.0f}%)\n", gib(plan.total_bytes), gib(*limit_bytes),
                       100 * plan.total_bytes / *limit_bytes);
    out += faster_that_fits(job, config, *limit_bytes);
    return out;
  }
  out += fmt::format("does not fit: {} needed, {} per rank\n", gib(plan.total_bytes), gib(*limit_bytes));
  const std::vector<FitChange> fit = changes_that_fit(job, config, *limit_bytes);
  if (fit.empty()) {
    out += "no single change nor pair of changes makes it fit: more nodes with FULL_SHARD, LoRA and activation "
           "checkpointing together, or a larger device\n";
    return out;
  }
  out += "changes that make it fit:\n";
  for (const FitChange& c : fit) {
    std::string sets;
    for (const std::string& o : c.overrides) sets += " --set " + o;
    out += fmt::format("  {:<60} {:>12}  ({})\n", c.what, gib(c.total_bytes), sets.substr(1));
  }
  return out;
}

std::string plan_json(const job::Job& job, const model::LlamaConfig& config, std::optional<double> limit_bytes,
                      const std::optional<NodeMemory>& node) {
  const MemoryPlan plan = plan_memory(job, config);
  nlohmann::ordered_json j;
  j["job"] = job.job.name;
  j["memory"] = plan.cuda ? "gpu" : "host";
  j["parameters"] = plan.parameters;
  j["trainable"] = plan.trainable;
  j["world_size"] = plan.world;
  j["shard_size"] = plan.shard_size;
  nlohmann::ordered_json parts = nlohmann::ordered_json::object();
  for (const MemoryPart& p : plan.parts) parts[p.name] = p.bytes;
  j["parts_bytes"] = parts;
  j["total_bytes"] = plan.total_bytes;
  j["loading_bytes"] = plan.loading_bytes;
  j["checkpoint_state_bytes"] = plan.checkpoint_state_bytes;
  j["checkpoint_copy_bytes"] = plan.checkpoint_copy_bytes;
  j["offload_bytes"] = plan.offload_bytes;
  if (!plan.cuda || plan.offload_bytes > 0) {
    j["ranks_per_node"] = plan.ranks_per_node;
    j["node_host_bytes"] = node_host_bytes(plan);
    if (node) {
      j["node_memory_bytes"] = node->bytes;
      j["node_fits"] = node_host_bytes(plan) <= node->bytes;
    }
  }
  if (limit_bytes) {
    j["limit_bytes"] = *limit_bytes;
    j["fits"] = plan.total_bytes <= *limit_bytes;
    if (job.fsdp.activation_checkpointing) {
      const std::optional<int64_t> most = most_uncheckpointed_blocks(job, config, kFasterShare * *limit_bytes);
      j["uncheckpointed_blocks_that_fit"] = most ? nlohmann::ordered_json(*most) : nlohmann::ordered_json();
    }
    nlohmann::ordered_json changes = nlohmann::ordered_json::array();
    if (plan.total_bytes > *limit_bytes)
      for (const FitChange& c : changes_that_fit(job, config, *limit_bytes))
        changes.push_back({{"change", c.what}, {"overrides", c.overrides}, {"total_bytes", c.total_bytes}});
    j["changes"] = changes;
  }
  return j.dump(2) + "\n";
}

}  // namespace shardtune::launcher
