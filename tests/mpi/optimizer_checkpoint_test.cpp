// The state of 8-bit AdamW and of Adafactor through real checkpoints at any world size: saved by
// all the ranks of this run, loaded by the first k of them for every k, it is the same state
// (saved again, the same checkpoint bit for bit, every kind of every tensor), and it steps on as
// the uninterrupted optimizer does. Sharded and full checkpoints. A checkpoint of another
// optimizer, or of Adafactor with or without a first moment where the job differs, is refused
// naming both.
//
// Gradients are a function of each tensor's element alone (not of the world size or the shard).
// 8-bit AdamW's update is element-wise, so every world size steps on bit for bit; Adafactor sums
// each tensor's rows and columns over the ranks, in an order that depends on the world size: bit
// for bit at the saving world size, within 1e-5 at the others.
#include <ATen/TensorOperators.h>
#include <ATen/ops/abs.h>
#include <ATen/ops/equal.h>
#include <ATen/ops/max.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <filesystem>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "checkpoint/checkpoint_reader.h"
#include "checkpoint/manifest.h"
#include "checkpoint/sharded_checkpoint.h"
#include "common/error.h"
#include "common/job/schema.h"
#include "runtime/fsdp/adafactor.h"
#include "runtime/fsdp/adamw.h"
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

std::unique_ptr<fsdp::Optimizer> make_optimizer(job::Optimizer optimizer, dist::Communicator& shard_group,
                                               double beta1) {
  if (optimizer != job::Optimizer::kAdafactor)
    return std::make_unique<fsdp::AdamW>(
        fsdp::AdamWConfig{0.9, 0.999, 1e-8, 0.01, true, optimizer == job::Optimizer::kAdamW8bit});
  fsdp::AdafactorConfig c;
  c.beta1 = beta1;
  c.weight_decay = 0.01;
  c.scale_parameter = true;
  return std::make_unique<fsdp::Adafactor>(c, &shard_group);
}

// A tiny model with its optimizer over the ranks of `comm` (Adafactor: with a first moment of
// `beta1`).
struct Trained {
  Trained(MPI_Comm comm, int ranks, job::Optimizer optimizer, double beta1 = 0.9)
      : groups(dist::make_mpi_groups(comm, ranks, 60.0)),
        skeleton(model::LlamaConfig::tiny(), at::TensorOptions().device(at::kMeta)),
        model(skeleton, groups, options(ranks, optimizer)),
        optimizer(make_optimizer(optimizer, *groups.shard, beta1)) {
    train::add_trainable_shards(model, *this->optimizer);
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
    optimizer->step(1e-2);
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
  std::unique_ptr<fsdp::Optimizer> optimizer;
};

// Every kind of every tensor of two checkpoints, bit for bit (`bound` 0) or within `bound` of the
// largest magnitude of each: the first difference, or empty.
std::string difference(const std::string& a, const std::string& b, double bound = 0) {
  checkpoint::CheckpointReader ra(a), rb(b);
  if (ra.manifest().optimizer != rb.manifest().optimizer) return "optimizer";
  int compared = 0;
  for (const std::string& name : ra.tensor_names())
    for (const char* kind : checkpoint::kStateKinds) {
      if (ra.has(kind, name) != rb.has(kind, name)) return fmt::format("{} of {} in one only", kind, name);
      if (!ra.has(kind, name)) continue;
      const at::Tensor x = ra.read_tensor(kind, name), y = rb.read_tensor(kind, name);
      const bool same = bound == 0 ? at::equal(x, y)
                                   : (x - y).abs().max().item<double>() <= bound * y.abs().max().item<double>();
      if (!same) return fmt::format("{} of {}", kind, name);
      ++compared;
    }
  if (compared == 0) return "nothing compared";
  return "";
}

class OptimizerCheckpoint : public testing::TestWithParam<std::tuple<job::Optimizer, bool>> {};  // consolidated?

TEST_P(OptimizerCheckpoint, ReloadsAtEveryWorldSizeAndStepsOnAsTheUninterruptedRun) {
  const auto [optimizer, consolidated] = GetParam();
  const std::string root = testing_support::shared_temp_dir(
      fmt::format("{}_{}", job::enum_name(optimizer), consolidated ? "full" : "sharded"));
  Trained all(MPI_COMM_WORLD, world_size(), optimizer);
  for (int s = 1; s <= 3; ++s) all.step(s);
  const std::string saved = checkpoint::save_checkpoint(all.model, all.optimizer.get(), all.state(3), all.groups,
                                                        {root + "/all", 10, consolidated});
  for (int s = 4; s <= 5; ++s) all.step(s);
  const std::string straight = checkpoint::save_checkpoint(all.model, all.optimizer.get(), all.state(5), all.groups,
                                                           {root + "/all", 10, consolidated});
  if (world_rank() == 0) {
    const checkpoint::Manifest m = checkpoint::read_manifest(saved);
    EXPECT_EQ(m.optimizer, job::enum_name(optimizer));
    checkpoint::CheckpointReader r(saved);
    if (optimizer == job::Optimizer::kAdamW8bit) {
      EXPECT_EQ(m.state_block, 256);
      EXPECT_TRUE(r.has("exp_avg_absmax", "model.embed_tokens.weight"));
    } else {  // a matrix's row and column means, a vector's second moment, every tensor's first moment
      const std::string q = "model.layers.0.self_attn.q_proj.weight", norm = "model.layers.0.input_layernorm.weight";
      EXPECT_TRUE(r.has("exp_avg_sq_row", q) && r.has("exp_avg_sq_col", q) && !r.has("exp_avg_sq", q));
      EXPECT_EQ(r.read_tensor("exp_avg_sq_row", q).numel(), r.shape(q)[0]);
      EXPECT_TRUE(r.has("exp_avg_sq", norm) && !r.has("exp_avg_sq_row", norm));
      EXPECT_TRUE(r.has("exp_avg", q) && r.has("exp_avg", norm));
    }
  }

  for (int k = 1; k <= world_size(); ++k) {
    SCOPED_TRACE(fmt::format("loaded by {} of {} ranks", k, world_size()));
    MPI_Comm sub;
    MPI_Comm_split(MPI_COMM_WORLD, world_rank() < k ? 0 : MPI_UNDEFINED, world_rank(), &sub);
    if (world_rank() < k) {
      Trained part(sub, k, optimizer);
      const checkpoint::TrainingState loaded =
          checkpoint::load_sharded_checkpoint(part.model, part.optimizer.get(), saved, *part.groups.world);
      EXPECT_EQ(loaded.step, 3);
      EXPECT_EQ(part.optimizer->step_count(), 3);
      const std::string dir = fmt::format("{}/at{}", root, k);
      const std::string again =
          checkpoint::save_checkpoint(part.model, part.optimizer.get(), part.state(3), part.groups, {dir, 10});
      for (int s = 4; s <= 5; ++s) part.step(s);
      const std::string on =
          checkpoint::save_checkpoint(part.model, part.optimizer.get(), part.state(5), part.groups, {dir, 10});
      if (world_rank() == 0) {
        EXPECT_EQ(difference(saved, again), "") << "the state after resharding is not the saved one";
        const bool bitwise = optimizer == job::Optimizer::kAdamW8bit || k == world_size();
        EXPECT_EQ(difference(straight, on, bitwise ? 0 : 1e-5), "")
            << "the resumed steps differ from the uninterrupted ones";
      }
      MPI_Comm_free(&sub);
    }
    MPI_Barrier(MPI_COMM_WORLD);
  }
  if (world_rank() == 0) fs::remove_all(root);
}

INSTANTIATE_TEST_SUITE_P(ShardedAndFull, OptimizerCheckpoint,
                         testing::Combine(testing::Values(job::Optimizer::kAdamW8bit, job::Optimizer::kAdafactor),
                                          testing::Values(false, true)));

// Loading `dir` with `reader`'s optimizer fails with kConfig, naming the directory and `words`.
void expect_refused(Trained& reader, const std::string& dir, const std::vector<std::string>& words) {
  try {
    checkpoint::load_sharded_checkpoint(reader.model, reader.optimizer.get(), dir, *reader.groups.world);
    ADD_FAILURE() << "loaded";
  } catch (const common::Error& e) {
    const std::string what = e.what();
    EXPECT_EQ(e.kind(), common::ErrorKind::kConfig) << what;
    EXPECT_NE(what.find(dir), std::string::npos) << what;
    for (const std::string& w : words) EXPECT_NE(what.find(w), std::string::npos) << w << " in " << what;
  }
}

// A checkpoint of one optimizer does not resume another: the error names both.
TEST(OptimizerCheckpointRefusal, AnotherOptimizersStateIsRefusedByName) {
  const std::string root = testing_support::shared_temp_dir("optimizer_refusal");
  const job::Optimizer kinds[] = {job::Optimizer::kAdamW, job::Optimizer::kAdamW8bit, job::Optimizer::kAdafactor};
  for (job::Optimizer saved_by : kinds) {
    Trained writer(MPI_COMM_WORLD, world_size(), saved_by);
    writer.step(1);
    const std::string dir = checkpoint::save_checkpoint(writer.model, writer.optimizer.get(), writer.state(1),
                                                        writer.groups, {fmt::format("{}/{}", root, job::enum_name(saved_by)), 10});
    for (job::Optimizer other : kinds) {
      if (other == saved_by) continue;
      Trained reader(MPI_COMM_WORLD, world_size(), other);
      expect_refused(reader, dir, {fmt::format("\"{}\"", job::enum_name(saved_by)), fmt::format("\"{}\"", job::enum_name(other))});
    }
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (world_rank() == 0) fs::remove_all(root);
}

// Adafactor's first moment comes back only where the job keeps one, and is never dropped.
TEST(OptimizerCheckpointRefusal, AdafactorWithAndWithoutAFirstMomentDoNotResumeEachOther) {
  const std::string root = testing_support::shared_temp_dir("adafactor_beta1_refusal");
  for (double saved_beta1 : {0.9, 0.0}) {
    Trained writer(MPI_COMM_WORLD, world_size(), job::Optimizer::kAdafactor, saved_beta1);
    writer.step(1);
    const std::string dir = checkpoint::save_checkpoint(writer.model, writer.optimizer.get(), writer.state(1),
                                                        writer.groups, {fmt::format("{}/{}", root, saved_beta1), 10});
    Trained reader(MPI_COMM_WORLD, world_size(), job::Optimizer::kAdafactor, saved_beta1 > 0 ? 0.0 : 0.9);
    expect_refused(reader, dir, {"first moment", "adafactor_beta1"});
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (world_rank() == 0) fs::remove_all(root);
}

}  // namespace
}  // namespace shardtune
