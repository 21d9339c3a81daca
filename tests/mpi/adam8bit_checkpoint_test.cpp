// 8-bit AdamW's state through real checkpoints at any world size: saved by all the ranks of this
// run, loaded by the first k of them for every k, it is the same state (saved again, the same
// checkpoint bit for bit, every kind of every tensor), and it steps on as the uninterrupted
// optimizer does, element for element. Sharded and full checkpoints. A checkpoint of another
// optimizer is refused naming both.
//
// Gradients are a function of each tensor's element alone (not of the world size or the shard),
// so every world size must reach the same state bit for bit.
#include <ATen/ops/equal.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "checkpoint/checkpoint_reader.h"
#include "checkpoint/manifest.h"
#include "checkpoint/sharded_checkpoint.h"
#include "common/error.h"
#include "runtime/fsdp/fsdp_options.h"
#include "runtime/train/train_step.h"
#include "tests/mpi/test_device.h"

namespace shardtune {
namespace {

namespace fs = std::filesystem;
using testing_support::world_rank;
using testing_support::world_size;

fsdp::FsdpOptions options(int ranks, job::Optimizer optimizer) {
  job::Job job;
  job.train.mixed_precision = false;
  job.train.optimizer = optimizer;
  return fsdp::fsdp_options(job.fsdp, job.train, ranks, ranks);
}

// A tiny model with its optimizer over the ranks of `comm`.
struct Trained {
  Trained(MPI_Comm comm, int ranks, job::Optimizer optimizer)
      : groups(dist::make_mpi_groups(comm, ranks, 60.0)),
        skeleton(model::LlamaConfig::tiny(), at::TensorOptions().device(at::kMeta)),
        model(skeleton, groups, options(ranks, optimizer)),
        adamw({0.9, 0.999, 1e-8, 0.01, true, optimizer == job::Optimizer::kAdamW8bit}) {
    train::add_trainable_shards(model, adamw);
  }

  // Every trainable element's gradient at `step` is a function of its tensor and its place in it.
  void step(int step) {
    for (fsdp::FlatParam* f : model.flat_params()) {
      if (!f->trainable()) continue;
      at::Tensor g = f->grad_shard();
      g.zero_();
      float* out = g.data_ptr<float>();
      for (const fsdp::ShardPiece& piece : f->layout().pieces_in_shard(f->shard_rank())) {
        const std::string& name = f->layout().params()[piece.param].name;
        const double salt = static_cast<double>(name.size() * 31 + static_cast<unsigned char>(name.back()));
        for (int64_t i = 0; i < piece.length; ++i) {
          const int64_t e = piece.param_offset + i;
          // Scales that differ from block to block, as a real model's gradients do.
          const double scale = std::pow(10.0, -static_cast<double>((e / 256) % 5));
          out[piece.shard_offset + i] = static_cast<float>(std::sin(e * 0.37 + salt + step * 1.3) * scale);
        }
      }
    }
    adamw.step(1e-2);
  }

  checkpoint::TrainingState state(int64_t step) const {
    checkpoint::TrainingState s;
    s.step = step;
    s.epoch = 1;
    s.reference_batch = 8;
    return s;
  }

  dist::ProcessGroups groups;
  model::LlamaForCausalLM skeleton;
  fsdp::FsdpLlama model;
  fsdp::AdamW adamw;
};

// Every kind of every tensor of two checkpoints, bit for bit (the first difference, or empty).
std::string difference(const std::string& a, const std::string& b) {
  checkpoint::CheckpointReader ra(a), rb(b);
  if (ra.manifest().optimizer != rb.manifest().optimizer) return "optimizer";
  int compared = 0;
  for (const std::string& name : ra.tensor_names())
    for (const char* kind : checkpoint::kStateKinds) {
      if (ra.has(kind, name) != rb.has(kind, name)) return fmt::format("{} of {} in one only", kind, name);
      if (!ra.has(kind, name)) continue;
      if (!at::equal(ra.read_tensor(kind, name), rb.read_tensor(kind, name))) return fmt::format("{} of {}", kind, name);
      ++compared;
    }
  if (compared == 0) return "nothing compared";
  return "";
}

class Adam8bitCheckpoint : public testing::TestWithParam<bool> {};  // consolidated?

TEST_P(Adam8bitCheckpoint, ReloadsAtEveryWorldSizeAndStepsOnAsTheUninterruptedRun) {
  const bool consolidated = GetParam();
  const std::string root = testing_support::shared_temp_dir(consolidated ? "adam8bit_full" : "adam8bit_sharded");
  Trained all(MPI_COMM_WORLD, world_size(), job::Optimizer::kAdamW8bit);
  for (int s = 1; s <= 3; ++s) all.step(s);
  const std::string saved =
      checkpoint::save_checkpoint(all.model, &all.adamw, all.state(3), all.groups, {root + "/all", 10, consolidated});
  for (int s = 4; s <= 5; ++s) all.step(s);
  const std::string straight =
      checkpoint::save_checkpoint(all.model, &all.adamw, all.state(5), all.groups, {root + "/all", 10, consolidated});
  if (world_rank() == 0) {
    const checkpoint::Manifest m = checkpoint::read_manifest(saved);
    EXPECT_EQ(m.optimizer, "adamw_8bit");
    EXPECT_EQ(m.state_block, 256);
    checkpoint::CheckpointReader r(saved);
    EXPECT_TRUE(r.has("exp_avg_absmax", "model.embed_tokens.weight"));
  }

  for (int k = 1; k <= world_size(); ++k) {
    SCOPED_TRACE(fmt::format("loaded by {} of {} ranks", k, world_size()));
    MPI_Comm sub;
    MPI_Comm_split(MPI_COMM_WORLD, world_rank() < k ? 0 : MPI_UNDEFINED, world_rank(), &sub);
    if (world_rank() < k) {
      Trained part(sub, k, job::Optimizer::kAdamW8bit);
      const checkpoint::TrainingState loaded = checkpoint::load_sharded_checkpoint(part.model, &part.adamw, saved, *part.groups.world);
      EXPECT_EQ(loaded.step, 3);
      EXPECT_EQ(part.adamw.step_count(), 3);
      const std::string dir = fmt::format("{}/at{}", root, k);
      const std::string again = checkpoint::save_checkpoint(part.model, &part.adamw, part.state(3), part.groups, {dir, 10});
      for (int s = 4; s <= 5; ++s) part.step(s);
      const std::string on = checkpoint::save_checkpoint(part.model, &part.adamw, part.state(5), part.groups, {dir, 10});
      if (world_rank() == 0) {
        EXPECT_EQ(difference(saved, again), "") << "the state after resharding is not the saved one";
        EXPECT_EQ(difference(straight, on), "") << "the resumed steps differ from the uninterrupted ones";
      }
      MPI_Comm_free(&sub);
    }
    MPI_Barrier(MPI_COMM_WORLD);
  }
  if (world_rank() == 0) fs::remove_all(root);
}

INSTANTIATE_TEST_SUITE_P(ShardedAndFull, Adam8bitCheckpoint, testing::Values(false, true));

// A checkpoint of one optimizer does not resume another: the error names both.
TEST(Adam8bitCheckpointRefusal, AnotherOptimizersStateIsRefusedByName) {
  const std::string root = testing_support::shared_temp_dir("adam8bit_refusal");
  for (job::Optimizer saved_by : {job::Optimizer::kAdamW8bit, job::Optimizer::kAdamW}) {
    const job::Optimizer other =
        saved_by == job::Optimizer::kAdamW ? job::Optimizer::kAdamW8bit : job::Optimizer::kAdamW;
    Trained writer(MPI_COMM_WORLD, world_size(), saved_by);
    writer.step(1);
    const std::string dir = checkpoint::save_checkpoint(writer.model, &writer.adamw, writer.state(1), writer.groups,
                                                        {fmt::format("{}/{}", root, static_cast<int>(saved_by)), 10});
    Trained reader(MPI_COMM_WORLD, world_size(), other);
    try {
      checkpoint::load_sharded_checkpoint(reader.model, &reader.adamw, dir, *reader.groups.world);
      ADD_FAILURE() << "loaded";
    } catch (const common::Error& e) {
      const std::string what = e.what();
      EXPECT_EQ(e.kind(), common::ErrorKind::kConfig) << what;
      EXPECT_NE(what.find("\"adamw_8bit\""), std::string::npos) << what;
      EXPECT_NE(what.find("\"adamw\""), std::string::npos) << what;
      EXPECT_NE(what.find(dir), std::string::npos) << what;
    }
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (world_rank() == 0) fs::remove_all(root);
}

}  // namespace
}  // namespace shardtune
