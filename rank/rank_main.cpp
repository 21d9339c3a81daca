// shardtune-rank: one MPI rank of a job, from the job file to the trained model. Reads from top to
// bottom: bootstrap MPI, check the ranks against the job and build the communicators
// (rank_start.h), the tokenizer and the model's shape, the sharded model (sharded_model.h), the
// data (runtime/data/job_data.h), the checkpoints (job_checkpoint.h), and the training loop.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <cstdlib>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "checkpoint/h5_check.h"
#include "checkpoint/resume.h"
#include "common/error.h"
#include "common/process_memory.h"
#include "common/exit_codes.h"
#include "common/process_exit.h"
#include "common/job/job_loader.h"
#include "common/open_files.h"
#include "common/log.h"
#include "common/subprocess.h"
#include "rank/job_checkpoint.h"
#include "rank/job_model.h"
#include "rank/rank_start.h"
#include "rank/sharded_model.h"
#include "runtime/data/job_data.h"
#include "runtime/model/job_model_config.h"
#include "runtime/dist/agree.h"
#include "runtime/dist/mpi_runtime.h"
#include "runtime/dist/text_collectives.h"
#include "runtime/dist/topology.h"
#include "runtime/train/host_allocator.h"
#include "runtime/train/stop_request.h"
#include "runtime/train/dpo_objective.h"
#include "runtime/train/reference_logps.h"
#include "runtime/train/trainer.h"
#include "common/job/schema.h"
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
  bool options = true;  // until "--"
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (options && a == "--") {
      options = false;
    } else if (options && a == "--set" && i + 1 < argc) {
      args.overrides.push_back(argv[++i]);
    } else if (args.job_path.empty() && !a.empty() && (!options || a[0] != '-')) {
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

// The job, or nullopt when it is invalid: every rank reads the same file and fails alike, so rank 0
// reports and all leave without an abort.
std::optional<job::Job> load_job(const Args& args, const dist::Topology& topo) {
  job::Diagnostics warnings;
  try {
    job::Job job = job::load_job_or_throw(args.job_path, args.overrides, &warnings);
    const std::string log_file = common::init_logging({job.job.output_dir});
    if (topo.rank == 0)
      for (const auto& w : warnings.all()) spdlog::warn("{}", job::format(w));
    spdlog::info("job '{}': {} ranks on {} node(s) ({}), {} per node; logs of every rank under {}/logs", job.job.name,
                 topo.world_size, topo.num_nodes, fmt::join(topo.node_hosts, ", "), topo.local_size,
                 job.job.output_dir);
    spdlog::debug("local rank {}/{}; log file {}", topo.local_rank, topo.local_size, log_file);
    return job;
  } catch (const job::JobError& e) {
    if (topo.rank == 0) fmt::print(stderr, "{}", e.what());
    return std::nullopt;
  }
}

// Every rank of the world takes part, each wait watched.
data::DataContext data_context(dist::Communicator& world) {
  return {world.rank(), world.size(),
          [&world](const std::string& what, const std::function<std::string()>& decide) {
            return dist::decide_on_root(world, decide, what);
          },
          [&world](bool mine) { return dist::min_over(world, mine ? 1 : 0) != 0; }};
}

// The loop's outcome as the process's exit code (common/exit_codes.h).
int train(const job::Job& job, const slurm::SlurmEnv& env, const model::LlamaConfig& config,
          dist::ProcessGroups& groups, fsdp::FsdpLlama& model, const data::Dataset& train_data,
          const data::Dataset* val_data, const train::CheckpointHooks& hooks,
          const train::PreferenceObjective* preference, const data::JobData& data) {
  train::TrainerOptions options{job.train, job.metrics, job.job.output_dir, job.checkpoint.every_steps, config};
  options.preference = preference;
  options.mixture = data.mixture;
  options.val_sources = data.val_sources;
  // Under Slurm, its stop signal comes signal_lead_s ahead of the time limit.
  if (env.in_job) options.signal_lead_s = static_cast<double>(job.slurm.signal_lead_s);
  train::Trainer trainer(std::move(options), groups, model, train_data, val_data, hooks);
  train::TrainSummary summary;
  try {
    summary = trainer.run();
  } catch (const common::Error& e) {
    // Every rank sees the same reduced loss, norm and finiteness, and stops at the same point.
    if (e.kind() != common::ErrorKind::kDiverged) throw;
    spdlog::critical("{}", e.what());
    return common::kExitDiverged;
  }
  if (summary.stop_signal != 0) {
    spdlog::warn("stopped on signal {} after {} step(s) with a committed checkpoint: exit {} asks for a requeue",
                 summary.stop_signal, summary.steps, common::kExitRequeue);
    return common::kExitRequeue;
  }
  if (summary.losses.empty()) {
    spdlog::info("done: nothing left to train");
  } else {
    spdlog::info("done: {} steps, loss {:.4f} -> {:.4f}, {:.0f} tokens/s; training stood still {:.3f} s for "
                 "checkpoints",
                 summary.steps, summary.losses.front(), summary.losses.back(), summary.tokens_per_second,
                 summary.save_seconds);
  }
  return 0;
}

// Under Slurm, a rank that lost its peers leaves a note for the batch script, which then requeues
// the job (slurm/sbatch_script.h): the checkpoints load at whatever world size the next start gets.
void note_lost_peers(const job::Job& job, const slurm::SlurmEnv& env, const std::string& why) {
  if (!env.in_job) return;
  std::ofstream note(slurm::lost_peers_file(job.job.output_dir, env.job_id), std::ios::app);
  note << why << "\n";
}

int run_job(const job::Job& job, const dist::Topology& topo, const slurm::SlurmEnv& env);

int run(int argc, char** argv) {
  train::install_stop_handlers();
  const Args args = parse_args(argc, argv);
  const dist::Topology topo = dist::discover_topology(MPI_COMM_WORLD);
  checkpoint::silence_hdf5_auto_print();  // HDF5 errors are reported in our own messages
  common::set_process_identity({topo.host, topo.rank, topo.world_size, topo.node, topo.local_rank});
  const std::optional<job::Job> job = load_job(args, topo);
  if (!job) return common::kExitJobError;
  const slurm::SlurmEnv env = slurm::read_slurm_env([](const char* name) { return std::getenv(name); });
  try {
    return run_job(*job, topo, env);
  } catch (const common::Error& e) {
    if (e.kind() == common::ErrorKind::kPeerLost) note_lost_peers(*job, env, e.what());
    throw;
  }
}

int run_job(const job::Job& job, const dist::Topology& topo, const slurm::SlurmEnv& env) {
  rank_program::RankStart start = rank_program::start_rank(job, topo, env);
  rank_program::announce_stop_handlers(job, topo, env, *start.groups.world);
  if (start.device.is_cpu()) {
    train::use_large_block_cache();
    spdlog::info("host tensors of {} MiB or more: mapped once and reused whole (runtime/train/host_allocator.h)",
                 train::kLargeHostBlockBytes >> 20);
  }

  const data::DataContext context = data_context(*start.groups.world);
  const std::string tokenizer =
      data::prepare_tokenizer(job, context, common::sibling_executable("shardtune-tokenize"));
  const model::LlamaConfig config = model::job_model_config(job, tokenizer);
  if (!rank_program::job_fits_model(job, config, topo.rank == 0)) return common::kExitJobError;
  const std::string config_json = config.to_json().dump();
  // The data first: its errors (a bad record, too few samples) come before any weight is read.
  const data::JobData data =
      data::load_job_data(job, {config.vocab_size, config.bos_token_id, config.eos_token_ids}, tokenizer, context);
  const int64_t restarts = env.restart_count;
  // A full fine-tune that resumes takes every weight from its checkpoint: the base is not read
  // (LoRA and QLoRA train on the base, so they read it as a first start does).
  const bool read_base = job.peft.adapters() || !checkpoint::will_resume(job.checkpoint, *start.groups.world, restarts);
  rank_program::ShardedModel model =
      rank_program::build_sharded_model(job, config, topo, start.groups, start.device, read_base);
  // DPO: its reference (which checkpoints record: a resume against another is refused) and, when
  // precomputed, the pairs with their reference log-probabilities.
  data::DataIdentity identity = data.identity;
  std::optional<train::DpoObjective> dpo;
  if (job.train.objective == job::Objective::kDpo) {
    identity.decides["dpo reference"] = train::dpo_reference_identity(job, model.weights_sha256);
    const auto frozen_copy = [&] {
      auto copy = std::make_shared<rank_program::ShardedModel>(
          rank_program::build_reference_model(job, config, topo, start.groups, start.device));
      return train::FrozenModel{copy, copy->sharded.get()};
    };
    // A full fine-tune that resumes does not read the base: its policy is no longer the reference.
    dpo.emplace(train::dpo_objective(job, *model.sharded, model.weights_sha256, *data.train, data.val.get(),
                                     !read_base, frozen_copy, *start.groups.world));
  }
  train::CheckpointHooks hooks = rank_program::checkpoint_hooks(
      job, config_json, *model.sharded, start.groups, restarts,
      rank_program::adapter_record(job, config_json, *start.groups.world, model.weights_sha256), identity);
  if (!read_base) {  // the checkpoint listed a moment ago must be there to resume
    hooks.resume = [resume = std::move(hooks.resume)](fsdp::Optimizer& optimizer) {
      std::optional<train::ResumePoint> at = resume(optimizer);
      ST_CHECK(at.has_value(), common::ErrorKind::kIo,
               "no checkpoint was resumed, though one was listed when the base weights were left unread; nothing "
               "was trained. HINT: start again: a start without a checkpoint reads the base");
      return at;
    };
  }
  const data::Dataset& train_data = dpo && dpo->train ? *dpo->train : *data.train;
  const data::Dataset* val_data = dpo && dpo->train ? dpo->val.get() : data.val.get();
  return train(job, env, config, start.groups, *model.sharded, train_data, val_data, hooks,
               dpo ? &dpo->objective : nullptr, data);
}

}  // namespace

int main(int argc, char** argv) {
  common::keep_freed_host_memory();
  common::raise_open_file_limit();  // checkpoints of many ranks are read with a share of it open
  // Before MPI starts: a stop that arrives while the rank starts is kept, not fatal. (run() installs
  // them again after MPI_Init, in case MPI took the signals.)
  train::install_stop_handlers();
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
  // The job's files and threads are closed and MPI is finalized.
  checkpoint::close_hdf5();
  common::exit_after_flush(code);
}
