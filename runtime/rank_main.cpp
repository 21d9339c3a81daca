// shardtune-rank: one MPI rank of a job. Bootstraps MPI, finds its node and device, builds the
// world, shard and replicate communicators, and checks them (preflight).
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/exit_codes.h"
#include "common/job/job_loader.h"
#include "common/job/schema.h"
#include "common/log.h"
#include "runtime/dist/device.h"
#include "runtime/dist/gpu_sharing.h"
#include "runtime/dist/mpi_check.h"
#include "runtime/dist/mpi_runtime.h"
#include "runtime/dist/process_groups.h"
#include "runtime/dist/topology.h"
#include "checkpoint/h5_check.h"
#include "checkpoint/hf/hf_tensor_source.h"
#include <nlohmann/json.hpp>
#include "runtime/fsdp/fsdp_llama.h"
#include "runtime/fsdp/shard_loader.h"
#include "runtime/job_checkpoint.h"
#include "runtime/job_data.h"
#include "runtime/job_model.h"
#include "runtime/preflight.h"
#include "runtime/train/stop_request.h"
#include "runtime/train/trainer.h"
#include "slurm/sbatch_script.h"
#include "slurm/slurm_env.h"

namespace {

using namespace shardtune;

struct Args {
  std::string job_path;
  std::vector<std::string> overrides;
};

Args parse_args(int argc, char** argv) {
  Args args;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--set" && i + 1 < argc) {
      args.overrides.push_back(argv[++i]);
    } else if (args.job_path.empty() && !a.empty() && a[0] != '-') {
      args.job_path = a;
    } else {
      common::raise(common::ErrorKind::kUsage,
                    fmt::format("unexpected argument '{}'. Usage: shardtune-rank JOB.toml [--set section.key=value]...", a));
    }
  }
  ST_CHECK(!args.job_path.empty(), common::ErrorKind::kUsage,
           "no job file. Usage: shardtune-rank JOB.toml [--set section.key=value]...");
  return args;
}

// A program installed beside shardtune-rank.
std::string sibling_executable(const std::string& name) {
  std::error_code ec;
  const auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  ST_CHECK(!ec, common::ErrorKind::kIo, "cannot find the shardtune-rank executable: {}", ec.message());
  return (self.parent_path() / name).string();
}

// The job's layout must be what MPI and Slurm actually started: a mismatch means a wrong launch
// line or allocation. Every rank sees the same problems except GPU visibility; all report.
void check_placement(const dist::Topology& topo, const job::Job& job) {
  const slurm::Placement placement{topo.world_size, topo.num_nodes, topo.uniform, topo.local_size, topo.node_hosts,
                                   dist::visible_gpus()};
  const slurm::SlurmEnv env = slurm::read_slurm_env([](const char* name) { return std::getenv(name); });
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

// Every rank handles the stop signal by now (the handlers come first in run()): tell the batch
// script, which holds Slurm's stop signal back until then.
void announce_stop_handlers(const job::Job& job, const dist::Topology& topo) {
  ST_MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
  const slurm::SlurmEnv env = slurm::read_slurm_env([](const char* name) { return std::getenv(name); });
  if (topo.rank != 0 || !env.in_job) return;
  const std::string path = slurm::ranks_ready_file(job.job.output_dir, env.job_id);
  std::ofstream ready(path);
  if (!ready) spdlog::warn("cannot create {}: a stop signal from Slurm will not reach the ranks", path);
}

// The device of this rank: the job's [launch] device against what this node and build offer.
dist::DeviceChoice choose_rank_device(const job::Job& job, const dist::Topology& topo) {
  const dist::DeviceRequest request = job.launch.device == job::Device::kCuda  ? dist::DeviceRequest::kCuda
                                      : job.launch.device == job::Device::kCpu ? dist::DeviceRequest::kCpu
                                                                               : dist::DeviceRequest::kAuto;
  const int local_rank = dist::launcher_local_rank(topo.local_rank, [](const char* n) { return std::getenv(n); });
  return dist::choose_device(request, local_rank, topo.local_size, dist::visible_gpus(), dist::cuda_build());
}

int run(int argc, char** argv) {
  train::install_stop_handlers();
  const Args args = parse_args(argc, argv);
  const dist::Topology topo = dist::discover_topology(MPI_COMM_WORLD);
  checkpoint::silence_hdf5_auto_print();  // HDF5 errors are reported in our own messages
  common::set_process_identity({topo.host, topo.rank, topo.world_size, topo.node, topo.local_rank});

  job::Diagnostics warnings;
  job::Job job;
  try {
    job = job::load_job_or_throw(args.job_path, args.overrides, &warnings);
  } catch (const job::JobError& e) {
    // Every rank reads the same file and fails alike: rank 0 reports, all leave without an abort.
    if (topo.rank == 0) fmt::print(stderr, "{}", e.what());
    return common::kExitJobError;
  }
  const std::string log_file = common::init_logging({job.job.output_dir});
  announce_stop_handlers(job, topo);
  if (topo.rank == 0)
    for (const auto& w : warnings.all()) spdlog::warn("{}", job::format(w));
  spdlog::info("job '{}': {} ranks on {} node(s) ({}), {} per node; logs of every rank under {}/logs", job.job.name,
               topo.world_size, topo.num_nodes, fmt::join(topo.node_hosts, ", "), topo.local_size,
               job.job.output_dir);
  spdlog::debug("local rank {}/{}; log file {}", topo.local_rank, topo.local_size, log_file);
  check_placement(topo, job);

  const dist::DeviceChoice device = choose_rank_device(job, topo);
  spdlog::info("device: {}", device.reason);
  const at::Device torch_device = device.device >= 0 ? at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(device.device))
                                                     : at::Device(at::kCPU);
  if (device.device >= 0) dist::bind_device(device.device);

  const int shard_size = static_cast<int>(job::shard_group_size(job));
  const dist::GroupOptions group_options{job.launch.collective_timeout_s, device.device,
                                         dist::choose_device_collectives(MPI_COMM_WORLD, device.device)};
  dist::ProcessGroups groups = dist::make_process_groups(MPI_COMM_WORLD, shard_size, group_options);
  spdlog::info("{}: {} shard group(s) of {} rank(s), replicated {}x; collective timeout {:.0f} s",
               job::enum_name(job.fsdp.sharding_strategy), groups.layout.num_shard_groups(),
               groups.layout.shard_size(), groups.layout.replicate_size(), job.launch.collective_timeout_s);

  log_shard_groups(groups.layout, topo);
  const runtime::PreflightReport report = runtime::run_preflight(groups, torch_device);
  if (!report.summary.empty()) spdlog::error("preflight: {}", report.summary);
  ST_CHECK(report.failures == 0, common::ErrorKind::kInternal,
           "preflight found {} wrong collective result(s); see the rank logs", report.failures);
  spdlog::info("preflight passed: world, shard and replicate communicators agree on {}; fp32 all-reduce of {} MiB "
               "at {:.2f} GB/s",
               torch_device.str(), report.allreduce_bytes >> 20, report.allreduce_gbps);

  // Either every rank builds the full model and keeps its shards, or the model is built without
  // weights and each rank receives only its shards from the readers.
  const runtime::DataContext data_context{
      topo.rank, topo.world_size, [] { ST_MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD)); },
      [](bool mine) {
        int in = mine ? 1 : 0, all = 0;
        ST_MPI_CHECK(MPI_Allreduce(&in, &all, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD));
        return all != 0;
      }};
  runtime::prepare_tokenizer(job, data_context, sibling_executable("shardtune-tokenize"));
  const model::LlamaConfig config = runtime::model_config(job);
  const bool stream = runtime::streams_weights(job, config);
  std::unique_ptr<model::LlamaForCausalLM> model =
      stream ? std::make_unique<model::LlamaForCausalLM>(config, at::TensorOptions().device(at::kMeta))
             : runtime::build_model(job);
  runtime::add_job_adapters(job, *model);
  const checkpoint::HfFolderSourceFactory source{job.model.path};
  if (stream) fsdp::validate_source(*model, source, MPI_COMM_WORLD);
  const bool lora = job.peft.method == job::PeftMethod::kLora;
  const fsdp::FsdpOptions fsdp_options = fsdp::fsdp_options(
      job.fsdp, job.train, topo.world_size, static_cast<int>(job.slurm.ranks_per_node()), torch_device, lora);
  const auto frozen = runtime::frozen_parameters(job, *model);
  int64_t trainable = 0;
  for (const model::NamedParam& p : model->named_parameters())
    if (!frozen.count(p.name)) trainable += p.tensor->numel();
  fsdp::FsdpLlama sharded(*model, groups, fsdp_options, frozen);
  if (stream) {
    const fsdp::LoadStats load = fsdp::load_shards(sharded, source, MPI_COMM_WORLD,
                                                   {job.fsdp.load_readers == job::LoadReaders::kNode});
    spdlog::info("streamed the weights into shards in {:.1f} s{}", load.seconds,
                 load.reader ? fmt::format(" ({:.2f} GB read by this rank)", static_cast<double>(load.bytes_read) / 1e9) : "");
  }
  spdlog::info("model: {:.1f}M parameters, {} trainable ({} frozen tensors{}), {} units; {} bytes of shards per rank",
               static_cast<double>(model->config().num_parameters()) / 1e6, trainable, frozen.size(),
               lora ? fmt::format(", LoRA r = {} on {}", job.peft.lora_r, fmt::join(job.peft.target_modules, ", ")) : "",
               model->num_layers() + 2, sharded.persistent_bytes());
  const runtime::JobData data = runtime::load_job_data(job, config, data_context);
  const slurm::SlurmEnv slurm_env = slurm::read_slurm_env([](const char* name) { return std::getenv(name); });
  const train::CheckpointHooks hooks =
      runtime::checkpoint_hooks(job, config.to_json().dump(), sharded, groups, slurm_env.restart_count);
  train::Trainer trainer({job.train, job.metrics, job.job.output_dir, job.checkpoint.every_steps, config}, groups, sharded,
                         *data.train, data.val.get(), hooks);
  const train::TrainSummary summary = trainer.run();
  if (summary.stop_signal != 0) {
    spdlog::warn("stopped on signal {} after {} step(s) with a committed checkpoint: exit {} asks for a requeue",
                 summary.stop_signal, summary.steps, common::kExitRequeue);
    return common::kExitRequeue;
  }
  if (summary.losses.empty()) {
    spdlog::info("done: nothing left to train");
  } else {
    spdlog::info("done: {} steps, loss {:.4f} -> {:.4f}, {:.0f} tokens/s", summary.steps, summary.losses.front(),
                 summary.losses.back(), summary.tokens_per_second);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  int code = 0;
  try {
    dist::MpiRuntime mpi(&argc, &argv);
    try {
      code = run(argc, argv);
    } catch (const std::exception& e) {
      spdlog::critical("{}", e.what());
      spdlog::shutdown();
      dist::MpiRuntime::abort(1);
    }
  } catch (const std::exception& e) {
    fmt::print(stderr, "shardtune-rank: {}\n", e.what());
    return 1;
  }
  return code;
}
