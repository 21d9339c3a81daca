// Checkpoints of device-resident training are the same files as from the CPU: a model trained a
// few steps on the test device (a GPU with ST_TEST_DEVICE=cuda) is saved, sharded and full; its
// exact state copied to the CPU is saved again, and every slice's checksums agree. Each
// checkpoint then loads into the other device bitwise: written on the GPU, resumed on the CPU,
// and the other way round. On the CPU alone (CI) the same code runs with both sides on the CPU,
// bf16 masters included, so the staged path of non-fp32 shards is exercised too.
#include <ATen/ops/empty.h>
#include <ATen/ops/equal.h>
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <tuple>

#include "checkpoint/block_crc.h"
#include "checkpoint/manifest.h"
#include "checkpoint/saved_state.h"
#include "checkpoint/sharded_checkpoint.h"
#include "checkpoint/update_crcs.h"
#include "common/job/schema.h"
#include "runtime/fsdp/adamw.h"
#include "runtime/model/init.h"
#include "runtime/data/dataset.h"
#include "runtime/train/train_step.h"
#include "tests/mpi/test_device.h"

namespace shardtune {
namespace {

namespace fs = std::filesystem;
using testing_support::world_rank;
using testing_support::world_size;

// A fresh folder every rank agrees on, made by rank 0.
std::string shared_dir(const std::string& name) { return testing_support::shared_temp_dir("device_ckpt_" + name); }

using SliceKey = std::tuple<std::string, std::string, int64_t>;  // kind, tensor, offset

std::map<SliceKey, std::vector<uint32_t>> slice_sums(const std::string& dir) {
  std::map<SliceKey, std::vector<uint32_t>> out;
  for (const checkpoint::ManifestSlice& s : checkpoint::read_manifest(dir).slices) out[{s.kind, s.tensor, s.offset}] = s.crcs;
  return out;
}

fsdp::FsdpOptions options_on(const c10::Device& device, bool pure_bf16) {
  job::Job job;
  job.slurm.ntasks_per_node = world_size();
  job.train.mixed_precision = true;
  job.train.pure_bf16 = pure_bf16;
  return fsdp::fsdp_options(job.fsdp, job.train, world_size(), static_cast<int>(job.slurm.ranks_per_node()), device);
}

// A sharded model and its optimizer on one device, without weights until trained or loaded.
struct Trained {
  Trained(const c10::Device& device, bool pure_bf16, dist::ProcessGroups groups_in,
          const model::LlamaConfig& config = model::LlamaConfig::tiny())
      : groups(std::move(groups_in)),
        skeleton(config, at::TensorOptions().device(at::kMeta)),
        model(skeleton, groups, options_on(device, pure_bf16)),
        optimizer({}) {
    train::add_trainable_shards(model, optimizer);
  }
  dist::ProcessGroups groups;
  model::LlamaForCausalLM skeleton;
  fsdp::FsdpLlama model;
  fsdp::AdamW optimizer;
};

void expect_same_state(Trained& a, Trained& b) {
  const auto fa = a.model.flat_params(), fb = b.model.flat_params();
  ASSERT_EQ(fa.size(), fb.size());
  for (size_t i = 0; i < fa.size(); ++i) EXPECT_TRUE(at::equal(fa[i]->shard().cpu(), fb[i]->shard().cpu())) << i;
  ASSERT_EQ(a.optimizer.size(), b.optimizer.size());
  for (size_t i = 0; i < a.optimizer.size(); ++i) {
    EXPECT_TRUE(at::equal(a.optimizer.exp_avg(i).cpu(), b.optimizer.exp_avg(i).cpu())) << i;
    EXPECT_TRUE(at::equal(a.optimizer.exp_avg_sq(i).cpu(), b.optimizer.exp_avg_sq(i).cpu())) << i;
  }
}

TEST(DeviceCheckpoint, DeviceAndCpuSavesAreTheSameFilesAndLoadIntoEachOther) {
  const c10::Device& device = testing_support::test_device();
  const int rank = world_rank(), world = world_size();
  for (bool pure_bf16 : {false, true}) {
    for (bool full : {false, true}) {
      SCOPED_TRACE(testing::Message() << (pure_bf16 ? "bf16 masters" : "fp32 masters") << (full ? ", full" : ", sharded"));
      // Trained on the device from the same initial weights on every rank.
      Trained on_device(device, pure_bf16, testing_support::make_test_groups(world));
      {
        model::LlamaForCausalLM init(model::LlamaConfig::tiny(), at::TensorOptions().dtype(at::kFloat));
        model::init_weights(init, 5);
        fsdp::FsdpLlama source(init, on_device.groups, options_on(c10::kCPU, pure_bf16));
        const auto from = source.flat_params(), to = on_device.model.flat_params();
        for (size_t i = 0; i < from.size(); ++i) to[i]->shard().copy_(from[i]->shard());
      }
      const data::SyntheticCopyDataset dataset(256, 16, 256, 3);
      for (int step = 0; step < 3; ++step) {
        at::Tensor ids = at::empty({2, 16}, at::kLong);
        for (int64_t b = 0; b < 2; ++b) {
          const data::Sample s = dataset.get((step * world + rank) * 2 + b);
          std::copy(s.input_ids.begin(), s.input_ids.end(), ids.data_ptr<int64_t>() + b * 16);
        }
        train::train_step(on_device.model, on_device.optimizer, {{ids, ids, {}, 1.0, {}}}, {1e-3}, *on_device.groups.world);
      }
      // The same state, copied to the CPU.
      Trained on_cpu(c10::kCPU, pure_bf16, dist::make_mpi_groups(MPI_COMM_WORLD, world, 60.0));
      const auto dev_flats = on_device.model.flat_params(), cpu_flats = on_cpu.model.flat_params();
      for (size_t i = 0; i < dev_flats.size(); ++i) cpu_flats[i]->shard().copy_(dev_flats[i]->shard());
      for (size_t i = 0; i < on_device.optimizer.size(); ++i) {
        on_cpu.optimizer.exp_avg(i).copy_(on_device.optimizer.exp_avg(i));
        on_cpu.optimizer.exp_avg_sq(i).copy_(on_device.optimizer.exp_avg_sq(i));
      }
      on_cpu.optimizer.set_step_count(on_device.optimizer.step_count());

      const std::string root = shared_dir(fmt::format("{}_{}", pure_bf16, full));
      const checkpoint::TrainingState state{3, 0, 6, 0, 0, false, "", ""};
      const std::string from_device =
          checkpoint::save_checkpoint(on_device.model, &on_device.optimizer, state, on_device.groups, {root + "/device", 1, full});
      const std::string from_cpu =
          checkpoint::save_checkpoint(on_cpu.model, &on_cpu.optimizer, state, on_cpu.groups, {root + "/cpu", 1, full});
      const auto device_sums = slice_sums(from_device), cpu_sums = slice_sums(from_cpu);
      EXPECT_EQ(device_sums.size(), cpu_sums.size());
      EXPECT_TRUE(device_sums == cpu_sums) << "the device's checkpoint differs from the same state saved from the CPU";

      // Written on the device, resumed on the CPU; written on the CPU, resumed on the device.
      Trained cpu_resume(c10::kCPU, pure_bf16, dist::make_mpi_groups(MPI_COMM_WORLD, world, 60.0));
      checkpoint::load_sharded_checkpoint(cpu_resume.model, &cpu_resume.optimizer, from_device, *cpu_resume.groups.world);
      expect_same_state(cpu_resume, on_device);
      Trained device_resume(device, pure_bf16, testing_support::make_test_groups(world));
      checkpoint::load_sharded_checkpoint(device_resume.model, &device_resume.optimizer, from_cpu, *device_resume.groups.world);
      expect_same_state(device_resume, on_device);
      MPI_Barrier(MPI_COMM_WORLD);
      if (rank == 0) fs::remove_all(root);
    }
  }
}

// A sharded save whose checksums were taken during the update it follows writes the same slices
// and checksums as one that computes them from the written memory, and each checksum taken equals
// the CRC-32 of its slice's block computed afresh (block_crcs). A tensor changed in place after the
// update is not given the old checksums. Shards of 0.3M to 1M elements: several of the optimizer's
// observed pieces each, with slices that straddle them.
TEST(DeviceCheckpoint, ChecksumsTakenDuringTheUpdateAreTheWrittenSlices) {
  const int rank = world_rank(), world = world_size();
  model::LlamaConfig config = model::LlamaConfig::tiny();
  config.hidden_size = 256;
  config.intermediate_size = 688;
  config.vocab_size = 4096;
  Trained t(c10::kCPU, false, dist::make_mpi_groups(MPI_COMM_WORLD, world, 60.0), config);
  {
    model::LlamaForCausalLM init(config, at::TensorOptions().dtype(at::kFloat));
    model::init_weights(init, 7);
    fsdp::FsdpLlama source(init, t.groups, options_on(c10::kCPU, false));
    const auto from = source.flat_params(), to = t.model.flat_params();
    for (size_t i = 0; i < from.size(); ++i) to[i]->shard().copy_(from[i]->shard());
  }
  const data::SyntheticCopyDataset dataset(config.vocab_size, 16, 256, 3);
  checkpoint::UpdateCrcs crcs;
  for (int step = 0; step < 2; ++step) {
    at::Tensor ids = at::empty({1, 16}, at::kLong);
    const data::Sample s = dataset.get(step * world + rank);
    std::copy(s.input_ids.begin(), s.input_ids.end(), ids.data_ptr<int64_t>());
    train::StepOptions options{1e-3};
    if (step == 1) options.updated_piece = crcs.watch(t.model, t.optimizer);
    train::train_step(t.model, t.optimizer, {{ids, ids, {}, 1.0, {}}}, options, *t.groups.world);
  }
  ASSERT_EQ(crcs.complete(), 3 * t.optimizer.size()) << "a shard or moment was not summed whole";
  int64_t largest = 0;
  for (fsdp::FlatParam* f : t.model.flat_params()) largest = std::max(largest, f->shard().numel());
  ASSERT_GT(largest, 2 * fsdp::AdamW::kObservedPieceElements) << "no shard spans several observed pieces";

  std::vector<checkpoint::FullUnit> units = checkpoint::saved_units(t.model, &t.optimizer, false);
  EXPECT_EQ(crcs.fill(units), units.size());
  for (const checkpoint::FullUnit& u : units) {
    const auto pieces = u.layout->pieces_in_shard(u.shard_rank);
    ASSERT_EQ(u.crcs.size(), pieces.size()) << u.kind;
    for (size_t i = 0; i < pieces.size(); ++i)
      EXPECT_EQ(u.crcs[i], checkpoint::block_crcs(u.shard.data_ptr<float>() + pieces[i].shard_offset, pieces[i].length))
          << u.kind << " " << u.layout->params()[pieces[i].param].name;
  }

  const std::string root = shared_dir("taken");
  checkpoint::TrainingState state;
  state.step = 2;
  const std::string taken = checkpoint::save_checkpoint(t.model, &t.optimizer, state, t.groups,
                                                        {root + "/taken", 1, false, true, &crcs});
  EXPECT_EQ(crcs.used(), units.size());
  const std::string computed = checkpoint::save_checkpoint(t.model, &t.optimizer, state, t.groups, {root + "/computed", 1});
  EXPECT_TRUE(slice_sums(taken) == slice_sums(computed)) << "checksums taken during the update differ from the file's";
  EXPECT_TRUE(checkpoint::verify_sharded_checkpoint(taken).problems.empty());

  // Changed in place after the update: its old checksums must not describe it.
  t.optimizer.exp_avg(0).add_(1.0);
  std::vector<checkpoint::FullUnit> again = checkpoint::saved_units(t.model, &t.optimizer, false);
  EXPECT_EQ(crcs.fill(again), units.size() - 1);
  const std::string changed = checkpoint::save_checkpoint(t.model, &t.optimizer, state, t.groups,
                                                          {root + "/changed", 1, false, true, &crcs});
  const checkpoint::VerifyReport report = checkpoint::verify_sharded_checkpoint(changed);
  EXPECT_TRUE(report.problems.empty()) << report.problems.front();
  EXPECT_FALSE(slice_sums(changed) == slice_sums(taken));
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) fs::remove_all(root);
}

}  // namespace
}  // namespace shardtune
