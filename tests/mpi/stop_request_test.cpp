// A stop request on one rank stops every rank at the same step boundary, after one checkpoint;
// further signals (SIGTERM twice) neither kill the process nor change the request.
#include <gtest/gtest.h>

#include <fmt/format.h>
#include <spdlog/sinks/ringbuffer_sink.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <csignal>
#include <memory>
#include <string>
#include <thread>
#include <utility>

#include "runtime/fsdp/fsdp_llama.h"
#include "runtime/model/init.h"
#include "runtime/data/dataset.h"
#include "runtime/train/stop_request.h"
#include "runtime/train/trainer.h"
#include "tests/mpi/test_device.h"

namespace shardtune {
namespace {

using testing_support::world_rank;
using testing_support::world_size;

// The tiny model sharded over the world, on synthetic data; `steps` optimizer steps at most.
struct TinyRun {
  explicit TinyRun(int64_t steps) {
    job.slurm.ntasks_per_node = world;
    job.train.batch_size_training = 2;
    job.train.num_epochs = 1;
    job.train.max_train_step = steps;
    job.train.mixed_precision = false;
    job.train.run_validation = false;
    job.metrics.jsonl = false;
    job.metrics.log_every_steps = 100;
    model::init_weights(m, 1);
    sharded = std::make_unique<fsdp::FsdpLlama>(
        m, groups, fsdp::fsdp_options(job.fsdp, job.train, world, static_cast<int>(job.slurm.ranks_per_node())));
  }
  const int rank = world_rank(), world = world_size();
  job::Job job;
  dist::ProcessGroups groups = dist::make_mpi_groups(MPI_COMM_WORLD, world, 60.0);
  model::LlamaForCausalLM m{model::LlamaConfig::tiny(), at::TensorOptions().dtype(at::kFloat)};
  std::unique_ptr<fsdp::FsdpLlama> sharded;
  const data::SyntheticCopyDataset dataset{4096, 16, 256, 3};
};

TEST(StopRequest, OneRanksSignalStopsEveryRankAtTheSameStepAfterOneSave) {
  TinyRun run(50);
  const int rank = run.rank, world = run.world;
  run.job.checkpoint.every_steps = 4;

  // The last rank is signalled during step 6 (a real SIGUSR1, through the installed handler).
  train::install_stop_handlers();
  std::vector<int64_t> saved_at;
  train::CheckpointHooks hooks;
  hooks.save = [&](fsdp::Optimizer&, const train::ResumePoint& at) {
    saved_at.push_back(at.step);
    if (at.step == 4 && rank == world - 1) {
      std::raise(SIGUSR1);  // arrives between boundaries 4 and 5
      std::raise(SIGTERM);  // and more, as at a real time limit: they change nothing
      std::raise(SIGTERM);
    }
  };
  const job::Job& job = run.job;
  train::Trainer trainer(
      {job.train, job.metrics, job.job.output_dir, job.checkpoint.every_steps, model::LlamaConfig::tiny()}, run.groups,
      *run.sharded, run.dataset, nullptr, hooks);
  const train::TrainSummary summary = trainer.run();

  EXPECT_EQ(summary.stop_signal, SIGUSR1);
  EXPECT_EQ(summary.steps, 4);  // the signal came during the save after step 4: stop right there
  EXPECT_EQ(saved_at, std::vector<int64_t>({4})) << "one save only: the one the signal interrupted";
  EXPECT_EQ(train::stop_signal(), rank == world - 1 ? SIGUSR1 : 0);
}

// Under Slurm the stop comes signal_lead_s ahead of the time limit: the measured longest step plus
// a foreground save (here slowed to 0.2 s) that do not fit in it are warned about, once, by rank 0.
TEST(StopRequest, ASignalLeadShorterThanAStepAndASaveIsWarnedAbout) {
  TinyRun run(6);
  const int rank = run.rank;
  train::CheckpointHooks hooks;
  hooks.save = [](fsdp::Optimizer&, const train::ResumePoint&) { std::this_thread::sleep_for(std::chrono::milliseconds(200)); };
  auto ring = std::make_shared<spdlog::sinks::ringbuffer_sink_mt>(64);
  const auto previous = spdlog::default_logger();
  spdlog::set_default_logger(std::make_shared<spdlog::logger>("test", ring));
  auto lead = [&](double signal_lead_s) {
    train::TrainerOptions options{run.job.train, run.job.metrics, run.job.job.output_dir, 2, model::LlamaConfig::tiny()};
    options.signal_lead_s = signal_lead_s;
    train::Trainer trainer(options, run.groups, *run.sharded, run.dataset, nullptr, hooks);
    const train::TrainSummary summary = trainer.run();
    int warnings = 0;
    for (const std::string& line : ring->last_formatted())
      warnings += line.find("signal_lead_s = " + fmt::format("{:g}", signal_lead_s) + " s is shorter than a step") !=
                  std::string::npos;
    return std::make_pair(summary, warnings);
  };
  const auto [short_lead, warned] = lead(0.1);
  const auto [long_lead, not_warned] = lead(3600);
  spdlog::set_default_logger(previous);
  EXPECT_GE(short_lead.stop_needs_s, 0.2);  // at least the save
  EXPECT_EQ(warned, rank == 0 ? 1 : 0) << "rank 0 warns, once";
  EXPECT_EQ(not_warned, 0);
  EXPECT_GE(long_lead.stop_needs_s, 0.2);
}

}  // namespace
}  // namespace shardtune
