// Placement, device and communicators of a rank.
#include "rank/rank_start.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>

#include "common/cpu_affinity.h"
#include "common/error.h"
#include "common/job/schema.h"
#include "common/malloc_pages.h"
#include "common/process_memory.h"
#include "runtime/dist/preflight.h"
#include "runtime/dist/cpu_threads.h"
#include "runtime/dist/device.h"
#include "runtime/dist/gpu_sharing.h"
#include "runtime/dist/mpi_check.h"
#include "slurm/sbatch_script.h"
#include "slurm/slurm_env.h"

namespace shardtune::rank_program {
namespace {

// The job's layout must be what MPI and Slurm actually started: a mismatch means a wrong launch
// line or allocation. Every rank sees the same problems except GPU visibility; all report.
void check_placement(const dist::Topology& topo, const job::Job& job, const slurm::SlurmEnv& env) {
  const slurm::Placement placement{topo.world_size, topo.num_nodes, topo.uniform, topo.local_size, topo.node_hosts,
                                   dist::visible_gpus()};
  if (env.in_job)
    spdlog::info("Slurm job {}{}: nodes {}", env.job_id,
                 env.restart_count > 0 ? fmt::format(" (restart {})", env.restart_count) : "", env.node_list);
  const std::vector<std::string> problems = slurm::placement_problems(job, placement, env);
  ST_CHECK(problems.empty(), common::ErrorKind::kConfig, "the ranks do not match the job: {}",
           fmt::format("{}", fmt::join(problems, "; ")));
}

// Which hosts each shard group spans: HSDP wants each group inside one node.
void log_shard_groups(const dist::GroupLayout& layout, const dist::Topology& topo) {
  if (topo.rank != 0 || layout.num_shard_groups() == 1) return;
  for (int g = 0; g < layout.num_shard_groups(); ++g) {
    const std::vector<int> members = layout.shard_group_members(g);
    std::vector<std::string> hosts;
    for (int r : members) {
      const std::string& h = topo.node_hosts.at(static_cast<size_t>(topo.rank_nodes.at(static_cast<size_t>(r))));
      if (std::find(hosts.begin(), hosts.end(), h) == hosts.end()) hosts.push_back(h);
    }
    if (hosts.size() == 1) {
      spdlog::info("shard group {}: ranks {}-{} on {}", g, members.front(), members.back(), hosts.front());
    } else {
      spdlog::warn("shard group {}: ranks {}-{} span {} nodes ({}): its all-gathers cross the network", g,
                   members.front(), members.back(), hosts.size(), fmt::join(hosts, ", "));
    }
  }
}

// The CPUs the launcher bound this rank to, and the threads it computes with on them: its share of
// the node, so that ranks sharing a node do not each start a pool the size of the whole node.
void set_cpu_threads(const job::Job& job, const dist::Topology& topo, const slurm::SlurmEnv& env) {
  const common::CpuAffinity cpus = common::cpu_affinity();
  spdlog::info("CPU affinity: {} CPU(s) ({})", cpus.cpus.size(), cpus.list());
  if (env.in_job && static_cast<int64_t>(cpus.cpus.size()) < job.slurm.cpus_per_task)
    spdlog::warn("this rank may run on {} CPU(s), but [slurm] cpus_per_task = {}: its threads share them",
                 cpus.cpus.size(), job.slurm.cpus_per_task);
  const dist::ThreadChoice threads =
      dist::choose_threads(dist::thread_inputs(job.launch.threads_per_rank, topo.local_size));
  dist::use_threads(threads.threads);
  spdlog::info("CPU threads: {} per rank ({}); BLAS: {}", threads.threads, threads.reason, dist::blas_description());
  const std::string thp = common::transparent_huge_page_mode();
  spdlog::info("malloc: {}", common::malloc_is_tcmalloc()
                                 ? fmt::format("tcmalloc (gperftools), freed spans kept for reuse; the kernel's "
                                               "transparent huge pages: {}", thp.empty() ? "unknown" : thp)
                                 : common::malloc_pages_description(std::getenv("GLIBC_TUNABLES"), thp));
  if (!cpus.cpus.empty() && threads.threads > static_cast<int>(cpus.cpus.size()))
    spdlog::warn("{} threads on {} CPU(s): they take turns", threads.threads, cpus.cpus.size());
}

// The device of this rank: the job's [launch] device against what this node and build offer.
dist::DeviceChoice choose_rank_device(const job::Job& job, const dist::Topology& topo) {
  const dist::DeviceRequest request = job.launch.device == job::Device::kCuda  ? dist::DeviceRequest::kCuda
                                      : job.launch.device == job::Device::kCpu ? dist::DeviceRequest::kCpu
                                                                               : dist::DeviceRequest::kAuto;
  const int local_rank = dist::launcher_local_rank(topo.local_rank, [](const char* n) { return std::getenv(n); });
  return dist::choose_device(request, local_rank, topo.local_size, dist::visible_gpus(), dist::cuda_build());
}

}  // namespace

void announce_stop_handlers(const job::Job& job, const dist::Topology& topo, const slurm::SlurmEnv& env,
                            dist::Communicator& world) {
  world.barrier();
  if (topo.rank != 0 || !env.in_job) return;
  const std::string path = slurm::ranks_ready_file(job.job.output_dir, env.job_id);
  std::ofstream ready(path);
  if (!ready) spdlog::warn("cannot create {}: a stop signal from Slurm will not reach the ranks", path);
}

RankStart start_rank(const job::Job& job, const dist::Topology& topo, const slurm::SlurmEnv& env) {
  check_placement(topo, job, env);
  const dist::DeviceChoice choice = choose_rank_device(job, topo);
  spdlog::info("device: {}", choice.reason);
  set_cpu_threads(job, topo, env);
  ST_CHECK(choice.device >= 0 || !(job.train.use_fp16 && job.train.mixed_precision), common::ErrorKind::kConfig,
           "[train] use_fp16 = true needs a GPU, and this rank trains on the CPU ({}): LibTorch has no fp16 matrix "
           "products there. HINT: leave use_fp16 false (mixed precision in bf16)",
           choice.reason);
  const at::Device device =
      choice.device >= 0 ? at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(choice.device)) : at::Device(at::kCPU);
  if (choice.device >= 0) dist::bind_device(choice.device);
  const int shard_size = static_cast<int>(job::shard_group_size(job.fsdp, topo.world_size, topo.local_size));
  const dist::GroupOptions options{job.launch.collective_timeout_s, choice.device,
                                   dist::choose_device_collectives(MPI_COMM_WORLD, choice.device)};
  RankStart out{device, dist::make_process_groups(MPI_COMM_WORLD, shard_size, options)};
  const dist::GroupLayout& layout = out.groups.layout;
  spdlog::info("{}: {} shard group(s) of {} rank(s), replicated {}x; collective timeout {:.0f} s",
               job::enum_name(job.fsdp.sharding_strategy), layout.num_shard_groups(), layout.shard_size(),
               layout.replicate_size(), job.launch.collective_timeout_s);
  log_shard_groups(layout, topo);
  const dist::PreflightReport report = dist::run_preflight(out.groups, out.device);
  if (!report.summary.empty()) spdlog::error("preflight: {}", report.summary);
  ST_CHECK(report.failures == 0, common::ErrorKind::kInternal,
           "preflight found {} wrong collective result(s); see the rank logs", report.failures);
  spdlog::info("preflight passed: world, shard and replicate communicators agree on {}; fp32 all-reduce of {} MiB "
               "at {:.2f} GB/s",
               out.device.str(), report.allreduce_bytes >> 20, report.allreduce_gbps);
  return out;
}

}  // namespace shardtune::rank_program
