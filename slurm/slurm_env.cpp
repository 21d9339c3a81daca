#include "slurm/slurm_env.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <charconv>
#include <map>

namespace shardtune::slurm {
namespace {

bool parse_int(std::string_view s, int64_t& out) {
  if (s.empty()) return false;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && end == s.data() + s.size();
}

int64_t env_int(const GetEnv& getenv, const char* name, int64_t fallback) {
  const char* v = getenv(name);
  int64_t out = 0;
  return v != nullptr && parse_int(v, out) ? out : fallback;
}

std::string env_text(const GetEnv& getenv, const char* name) {
  const char* v = getenv(name);
  return v != nullptr ? v : "";
}

}  // namespace

SlurmEnv read_slurm_env(const GetEnv& getenv) {
  SlurmEnv env;
  env.job_id = env_text(getenv, "SLURM_JOB_ID");
  env.in_job = !env.job_id.empty();
  env.num_nodes = env_int(getenv, "SLURM_JOB_NUM_NODES", env_int(getenv, "SLURM_NNODES", 0));
  env.node_list = env_text(getenv, "SLURM_JOB_NODELIST");
  // Slurm's requeues of this job, and the resubmissions before it (after a lost node).
  env.restart_count = env_int(getenv, "SLURM_RESTART_COUNT", 0) + env_int(getenv, "SHARDTUNE_RESTARTS", 0);
  return env;
}

std::vector<std::string> placement_problems(const job::Job& job, const Placement& p, const SlurmEnv& env) {
  std::vector<std::string> problems;
  const int64_t most = job.slurm.nodes, fewest = job.slurm.min_nodes > 0 ? job.slurm.min_nodes : most;
  const int64_t per_node = job.slurm.ranks_per_node();
  const auto allowed = [&](int64_t n) { return n >= fewest && n <= most; };
  const std::string asked = fewest == most ? fmt::format("{}", most) : fmt::format("{} to {}", fewest, most);
  if (env.in_job && env.num_nodes > 0 && !allowed(env.num_nodes)) {
    problems.push_back(fmt::format(
        "the job asks for {} node(s) but Slurm job {} has {} ({}). HINT: submit with `shardtune submit`, which "
        "asks sbatch for [slurm] nodes",
        asked, env.job_id, env.num_nodes, env.node_list));
  }
  // The nodes this start was given: Slurm's count inside a job, else what MPI started, when the
  // job allows that many; else the job's own count, which the message then sets against MPI's.
  const int64_t given = env.in_job && env.num_nodes > 0 ? env.num_nodes : p.num_nodes;
  const int64_t nodes = allowed(given) ? given : most;
  if (p.world_size != nodes * per_node || p.num_nodes != nodes || !p.uniform) {
    problems.push_back(fmt::format(
        "the job asks for {} node(s) x {} rank(s) = {} but MPI started {} rank(s) on {} node(s){}. HINT: start the "
        "job with `shardtune run` or `shardtune submit`",
        nodes, per_node, nodes * per_node, p.world_size, p.num_nodes,
        p.uniform ? "" : " with a different number of ranks on some nodes"));
  }
  std::map<std::string, std::vector<size_t>> nodes_of_host;
  for (size_t i = 0; i < p.node_hosts.size(); ++i) nodes_of_host[p.node_hosts[i]].push_back(i);
  for (const auto& [host, indices] : nodes_of_host) {
    if (indices.size() > 1) {
      problems.push_back(fmt::format(
          "{} nodes (by shared memory) report the same hostname \"{}\": nodes {}. Ranks that share a hostname but not "
          "memory break MPI's shared-memory transport. HINT: give every node its own hostname",
          indices.size(), host, fmt::join(indices, ", ")));
    }
  }
  const int64_t gpus = job.slurm.gpus_per_node;
  if (gpus > 0 && p.visible_gpus == 0) {
    problems.push_back(fmt::format(
        "the job asks for {} GPU(s) per node but this rank sees none. HINT: check --gpus-per-node and "
        "CUDA_VISIBLE_DEVICES",
        gpus));
  } else if (gpus > 0 && p.visible_gpus > 1 && p.visible_gpus < p.local_size) {
    problems.push_back(fmt::format(
        "{} ranks run on this node but only {} GPUs are visible: shardtune runs one rank per GPU. HINT: set "
        "[slurm] ntasks_per_node = gpus_per_node",
        p.local_size, p.visible_gpus));
  }
  return problems;
}

}  // namespace shardtune::slurm
