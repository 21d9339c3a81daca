// Sharded training beyond fp32 equivalence: each rank's persistent memory against the formula of
// its strategy (counted by an allocator that sees every CPU tensor, or by the CUDA caching
// allocator's live bytes on a GPU), bf16 mixed precision learning a task to a stated loss, and
// fp16 with the dynamic loss scaler; on the test device (a GPU with ST_TEST_DEVICE=cuda).
#include <ATen/ops/empty.h>
#include <ATen/ops/mm.h>
#include <ATen/ops/ones.h>
#include <c10/core/CPUAllocator.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <iostream>
#include <limits>
#include <mutex>
#include <numeric>
#include <unordered_map>
#include <vector>

#include "common/job/schema.h"
#include "runtime/fsdp/adamw.h"
#include "runtime/fsdp/fsdp_llama.h"
#include "runtime/model/init.h"
#include "runtime/train/data_order.h"
#include "runtime/data/dataset.h"
#include "runtime/dist/device.h"
#include "runtime/train/train_step.h"
#include "tests/mpi/test_device.h"
#include "tests/counting_allocator.h"

namespace shardtune {
namespace {

using testing_support::CountingAllocator;
using testing_support::counting_allocator;

int world_size() {
  int w = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &w);
  return w;
}

fsdp::FsdpOptions options_for(job::ShardingStrategy strategy, int hsdp_shard, bool mixed, bool fp16 = false) {
  job::Job job;
  job.slurm.ntasks_per_node = world_size();
  job.fsdp.sharding_strategy = strategy;
  job.fsdp.hsdp_shard_size = hsdp_shard;
  job.train.mixed_precision = mixed;
  job.train.use_fp16 = fp16;
  return fsdp::fsdp_options(job.fsdp, job.train, world_size(), static_cast<int>(job.slurm.ranks_per_node()),
                            testing_support::test_device());
}

// Bytes in live tensors on the test device.
int64_t live_bytes() {
  const c10::Device& d = testing_support::test_device();
  return d.is_cpu() ? CountingAllocator::live() : dist::memory_stats(d).allocated;
}

std::vector<train::Batch> copy_task_batches(const data::Dataset& dataset, const train::DataOrder& order, int64_t global,
                                            int64_t step, int rank, int ranks) {
  const std::vector<int64_t> idx = order.samples(order.permutation(0), step * global, global, 0, 1, rank, ranks);
  train::Batch b{at::empty({static_cast<int64_t>(idx.size()), 0}, at::kLong), {}, {}, 1.0, {}};
  std::vector<at::Tensor> ids, labels;
  const int64_t t = static_cast<int64_t>(dataset.get(0).input_ids.size());
  b.input_ids = at::empty({static_cast<int64_t>(idx.size()), t}, at::kLong);
  b.labels = at::empty({static_cast<int64_t>(idx.size()), t}, at::kLong);
  for (size_t i = 0; i < idx.size(); ++i) {
    const data::Sample s = dataset.get(idx[i]);
    std::copy(s.input_ids.begin(), s.input_ids.end(), b.input_ids.data_ptr<int64_t>() + i * t);
    std::copy(s.labels.begin(), s.labels.end(), b.labels.data_ptr<int64_t>() + i * t);
  }
  return {b};
}

struct MemoryCase {
  job::ShardingStrategy strategy;
  int hsdp_shard;
  bool mixed;
  double bytes_per_param_per_shard;  // the formula: bytes per parameter divided by the shard group size
  double extra_bytes_per_param;      // kept unsharded (NO_SHARD keeps its bf16 copy)
};

TEST(FsdpMemory, PersistentBytesMatchTheStrategyFormula) {
  counting_allocator();
  const int w = world_size();
  std::vector<MemoryCase> cases = {
      {job::ShardingStrategy::kFullShard, 0, true, 16, 0},    // fp32 master, grad, 2 moments
      {job::ShardingStrategy::kShardGradOp, 0, true, 16, 0},  // freed after backward too
      {job::ShardingStrategy::kFullShard, 0, false, 16, 0},
      {job::ShardingStrategy::kNoShard, 0, true, 16, 2},      // + its bf16 compute copy
      {job::ShardingStrategy::kNoShard, 0, false, 16, 0},     // fp32: the master is the compute copy
  };
  if (w == 4) cases.push_back({job::ShardingStrategy::kHybridShard, 2, true, 16, 0});
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  // Device libraries keep workspaces for the life of the process (cuBLAS one per thread: the
  // forward's and autograd's); made before the first baseline, they are not counted as the model's.
  {
    at::Tensor a = at::ones({16, 16}, at::TensorOptions().device(testing_support::test_device()));
    a.set_requires_grad(true);
    at::mm(a, a).sum().backward();
  }
  for (const MemoryCase& c : cases) {
    SCOPED_TRACE(testing::Message() << job::enum_name(c.strategy) << (c.mixed ? " bf16 mixed" : " fp32"));
    const fsdp::FsdpOptions options = options_for(c.strategy, c.hsdp_shard, c.mixed);
    dist::ProcessGroups groups = testing_support::make_test_groups(options.shard_size);
    const int64_t baseline = live_bytes();
    model::LlamaConfig cfg = model::LlamaConfig::tiny();
    cfg.hidden_size = 128;
    cfg.intermediate_size = 352;
    cfg.head_dim = 32;
    model::LlamaForCausalLM m(cfg, at::TensorOptions().dtype(at::kFloat));
    model::init_weights(m, 1);
    const double n = static_cast<double>(cfg.num_parameters());
    fsdp::FsdpLlama sharded(m, groups, options);
    fsdp::AdamW opt({});
    train::add_trainable_shards(sharded, opt);
    const data::SyntheticCopyDataset dataset(64, 16, cfg.vocab_size, 3);
    const train::DataOrder order(64, 5);
    for (int step = 0; step < 2; ++step)
      train::train_step(sharded, opt, copy_task_batches(dataset, order, 2 * w, step, rank, w), {1e-3}, *groups.world);
    const double persistent = static_cast<double>(live_bytes() - baseline);
    const double formula = n * (c.bytes_per_param_per_shard / options.shard_size + c.extra_bytes_per_param);
    // Padding (< shard size elements per flat parameter) and the model's RoPE table are the slack.
    EXPECT_NEAR(persistent / formula, 1.0, 0.01) << "persistent " << persistent << " bytes, formula " << formula;
    EXPECT_NEAR(static_cast<double>(sharded.persistent_bytes() + opt.state_bytes()) / formula, 1.0, 0.01);
  }
}

// The most bytes live at once on the test device since the last reset_peak_bytes().
void reset_peak_bytes() {
  const c10::Device& d = testing_support::test_device();
  if (d.is_cpu()) CountingAllocator::reset_peak();
  else dist::reset_peak_memory(d);
}
int64_t peak_bytes() {
  const c10::Device& d = testing_support::test_device();
  return d.is_cpu() ? CountingAllocator::peak() : dist::memory_stats(d).peak_allocated;
}

// The peak of a forward and backward with the last K blocks exempt from activation checkpointing,
// against the same without checkpointing: each exempt block holds its saved tensors in place of
// its input, and the exempt blocks' backward frees them before the first block is recomputed. So
// the first exempt block costs a fraction of a block (its tensors meet only the head's backward,
// not a recomputed block's), the peak grows by the same amount with each exempt block after it,
// and with every block exempt it is the peak without checkpointing. (The planner counts the
// blocks the same way: launcher/memory_plan.cpp.)
TEST(FsdpMemory, EachBlockExemptFromCheckpointingAddsItsActivationsToThePeak) {
  counting_allocator();
  model::LlamaConfig cfg = model::LlamaConfig::tiny();
  cfg.num_hidden_layers = 5;
  const int64_t layers = cfg.num_hidden_layers;
  const data::SyntheticCopyDataset dataset(64, 64, cfg.vocab_size, 3);
  const train::DataOrder order(64, 5);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  const std::vector<train::Batch> batch = copy_task_batches(dataset, order, 4 * world_size(), 0, rank, world_size());
  std::vector<double> peak;  // [0]: no checkpointing; [1 + K]: K blocks exempt
  // -2: a first step without checkpointing, not counted: a device library's workspaces, made at
  // its first use and kept for the process, are not any configuration's activations.
  for (int64_t exempt = -2; exempt <= layers; ++exempt) {
    job::Job job;
    job.slurm.ntasks_per_node = world_size();
    job.fsdp.activation_checkpointing = exempt >= 0;
    job.fsdp.uncheckpointed_blocks = std::max<int64_t>(exempt, 0);
    const fsdp::FsdpOptions options = fsdp::fsdp_options(job.fsdp, job.train, world_size(), world_size(),
                                                         testing_support::test_device());
    dist::ProcessGroups groups = testing_support::make_test_groups(options.shard_size);
    model::LlamaForCausalLM m(cfg, at::TensorOptions().dtype(at::kFloat));
    model::init_weights(m, 1);
    fsdp::FsdpLlama sharded(m, groups, options);
    const int64_t before = live_bytes();
    reset_peak_bytes();
    sharded.forward_loss(batch[0].input_ids, at::Tensor(), batch[0].labels).backward();
    sharded.finish_grad_sync();
    if (exempt > -2) peak.push_back(static_cast<double>(peak_bytes() - before));
  }
  if (rank == 0) {
    std::cout << "peak bytes without checkpointing " << peak[0] << "; with K blocks exempt:";
    for (size_t k = 1; k < peak.size(); ++k) std::cout << " " << peak[k];
    std::cout << "\n";
  }
  const double all = peak[1 + layers], one = peak[2];
  EXPECT_NEAR(all / peak[0], 1.0, 0.01) << "every block exempt keeps what no checkpointing keeps";
  EXPECT_LT(peak[1], peak[0] * 0.8) << "checkpointing every block keeps less";
  const double per_block = (all - one) / static_cast<double>(layers - 1);
  EXPECT_GT(per_block, 0);
  EXPECT_LT(one - peak[1], 0.5 * per_block) << "the first exempt block";
  for (int64_t k = 1; k <= layers; ++k)
    EXPECT_NEAR(peak[1 + k], one + per_block * static_cast<double>(k - 1), 0.02 * all) << k << " blocks exempt";
}

// Threshold: 1.0 nats within 300 steps (uniform guessing over the 64-token alphabet is 4.16).
void expect_learns_copy_task(const fsdp::FsdpOptions& options) {
  const int w = world_size();
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  dist::ProcessGroups groups = testing_support::make_test_groups(options.shard_size);
  model::LlamaForCausalLM m(model::LlamaConfig::tiny(), at::TensorOptions().dtype(at::kFloat));
  model::init_weights(m, 1);
  fsdp::FsdpLlama sharded(m, groups, options);
  for (fsdp::FlatParam* f : sharded.flat_params()) ASSERT_EQ(f->shard().scalar_type(), options.precision.master);
  fsdp::AdamW opt({});
  train::add_trainable_shards(sharded, opt);
  const data::SyntheticCopyDataset dataset(16 * 400, 32, 256, 3);
  const train::DataOrder order(16 * 400, 5);
  // Learned: the mean loss of the last kWindow steps below 1.0. Training stops there (every rank
  // sees the same all-reduced losses, so all stop at the same step).
  constexpr int kWindow = 10;
  std::vector<double> losses;
  double recent = 0;
  for (int step = 0; step < 300; ++step) {
    losses.push_back(
        train::train_step(sharded, opt, copy_task_batches(dataset, order, 16, step, rank, w), {3e-3}, *groups.world).loss);
    if (losses.size() < kWindow) continue;
    recent = std::accumulate(losses.end() - kWindow, losses.end(), 0.0) / kWindow;
    if (recent < 1.0) break;
  }
  if (rank == 0) std::cout << "copy task learned to " << recent << " nats in " << losses.size() << " steps\n";
  EXPECT_GT(losses.front(), 5.0);
  EXPECT_LT(recent, 1.0) << "training did not learn the copy task in 300 steps";
}

TEST(FsdpTraining, Bf16MixedPrecisionLearnsTheCopyTask) {
  fsdp::FsdpOptions options = options_for(job::ShardingStrategy::kFullShard, 0, true);
  ASSERT_EQ(options.precision.compute, at::kBFloat16);
  ASSERT_EQ(options.precision.master, at::kFloat);
  expect_learns_copy_task(options);
}

// reduce_dtype = "bf16", as llama-recipes does: gradients summed across the ranks in bf16, whose
// rounding grows with the world size (run at 4 ranks too).
TEST(FsdpTraining, Bf16ReduceLearnsTheCopyTask) {
  fsdp::FsdpOptions options = options_for(job::ShardingStrategy::kFullShard, 0, true);
  options.precision.reduce = at::kBFloat16;
  expect_learns_copy_task(options);
}

TEST(FsdpTraining, PureBf16LearnsTheCopyTask) {
  job::Job job;
  job.slurm.ntasks_per_node = world_size();
  job.train.pure_bf16 = true;
  const fsdp::FsdpOptions options = fsdp::fsdp_options(
      job.fsdp, job.train, world_size(), static_cast<int>(job.slurm.ranks_per_node()), testing_support::test_device());
  ASSERT_EQ(options.precision.master, at::kBFloat16);
  expect_learns_copy_task(options);
}

// fp16 matrix products on the CPU arrived in LibTorch 2.x; 1.13 has none. GPUs have them.
bool half_matmul_available() {
  try {
    const at::TensorOptions half = at::TensorOptions().dtype(at::kHalf).device(testing_support::test_device());
    at::mm(at::ones({2, 2}, half), at::ones({2, 2}, half));
    return true;
  } catch (const c10::Error&) {
    return false;
  }
}

TEST(FsdpTraining, Fp16LossScalerSkipsOverflowsAndTrains) {
  if (!half_matmul_available()) GTEST_SKIP() << "this LibTorch has no fp16 matmul on this device";
  const int w = world_size();
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  const fsdp::FsdpOptions options = options_for(job::ShardingStrategy::kFullShard, 0, true, /*fp16=*/true);
  ASSERT_EQ(options.precision.compute, at::kHalf);
  dist::ProcessGroups groups = testing_support::make_test_groups(options.shard_size);
  model::LlamaForCausalLM m(model::LlamaConfig::tiny(), at::TensorOptions().dtype(at::kFloat));
  model::init_weights(m, 1);
  fsdp::FsdpLlama sharded(m, groups, options);
  fsdp::AdamW opt({});
  train::add_trainable_shards(sharded, opt);
  // A scale far beyond fp16's range: the first steps overflow and are skipped until it fits.
  fsdp::LossScaler scaler(1e30, 50);
  const data::SyntheticCopyDataset dataset(16 * 200, 32, 256, 3);
  const train::DataOrder order(16 * 200, 5);
  train::StepOptions step{3e-3};
  step.loss_scaler = &scaler;
  double first = 0, last = 0;
  int skipped = 0;
  for (int s = 0; s < 150; ++s) {
    const train::StepResult r = train::train_step(sharded, opt, copy_task_batches(dataset, order, 16, s, rank, w), step, *groups.world);
    skipped += r.skipped ? 1 : 0;
    if (s == 0) first = r.loss;
    last = r.loss;
  }
  EXPECT_GE(skipped, 10);  // 1e30 must halve to below ~65504 / |grad| first
  EXPECT_EQ(skipped, scaler.skipped_steps());
  EXPECT_EQ(opt.step_count(), 150 - skipped);
  EXPECT_LT(scaler.scale(), 1e30);
  EXPECT_LT(last, first - 1.0) << "fp16 training did not learn";
}

}  // namespace
}  // namespace shardtune

namespace shardtune {
namespace {

// The scaler's verdict is the same on every rank even when only one rank overflowed.
TEST(LossScaler, OneRanksOverflowSkipsTheStepEverywhere) {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  const fsdp::FsdpOptions options = options_for(job::ShardingStrategy::kFullShard, 0, false);
  dist::ProcessGroups groups = testing_support::make_test_groups(options.shard_size);
  model::LlamaForCausalLM m(model::LlamaConfig::tiny(), at::TensorOptions().dtype(at::kFloat));
  model::init_weights(m, 1);
  fsdp::FsdpLlama sharded(m, groups, options);
  fsdp::LossScaler scaler(1024.0, 2);
  for (fsdp::FlatParam* f : sharded.flat_params()) f->grad_shard().fill_(512.0);
  if (rank == world_size() - 1) sharded.flat_params().back()->grad_shard()[0] = std::numeric_limits<float>::infinity();
  EXPECT_FALSE(scaler.unscale_and_check(sharded.flat_params(), *groups.world));
  EXPECT_EQ(scaler.scale(), 512.0);
  for (fsdp::FlatParam* f : sharded.flat_params()) f->grad_shard().fill_(512.0);
  EXPECT_TRUE(scaler.unscale_and_check(sharded.flat_params(), *groups.world));
  EXPECT_EQ(sharded.flat_params().front()->grad_shard()[0].item<float>(), 1.0f);  // unscaled
  EXPECT_TRUE(scaler.unscale_and_check(sharded.flat_params(), *groups.world));
  EXPECT_EQ(scaler.scale(), 1024.0);  // grown after 2 clean steps
  EXPECT_EQ(scaler.skipped_steps(), 1);
}

}  // namespace
}  // namespace shardtune
