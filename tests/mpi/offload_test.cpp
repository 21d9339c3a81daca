// [fsdp] cpu_offload at this world size: the shards that it offloads (the trainable ones; with
// offload_params the frozen ones too, NF4 records included) and their gradients live in host
// memory and the optimizer steps there, and training gives what it gives without offload: the same
// losses and the same parameters after every step, bit for bit on the CPU, where both paths run the
// same operations (on a GPU the optimizer's host loop and the device's fused kernel round alike to
// within an ulp, scripts/gpu-check.sh). A full fine-tune in fp32 and in bf16 mixed precision, under
// FULL_SHARD and NO_SHARD; QLoRA with its base offloaded.
#include <ATen/ops/equal.h>
#include <ATen/ops/randint.h>
#include <ATen/Context.h>
#include <gtest/gtest.h>
#include <mpi.h>

#include <map>
#include <string>
#include <vector>

#include "runtime/fsdp/adamw.h"
#include "runtime/fsdp/fsdp_llama.h"
#include "runtime/fsdp/fsdp_options.h"
#include "runtime/model/init.h"
#include "runtime/model/lora.h"
#include "runtime/train/train_step.h"
#include "tests/mpi/test_device.h"

namespace shardtune {
namespace {

using testing_support::world_rank;
using testing_support::world_size;

struct Case {
  job::ShardingStrategy strategy = job::ShardingStrategy::kFullShard;
  bool mixed = false;
  bool qlora = false;
};

struct Run {
  std::vector<double> losses;
  std::map<std::string, at::Tensor> params;
  bool offloaded_where_asked = true;
};

// Five AdamW steps of the tiny model on one batch of random tokens (each rank its own), with or
// without offload.
Run train(const Case& c, bool offload) {
  job::Job job;
  job.slurm.ntasks_per_node = world_size();
  job.fsdp.sharding_strategy = c.strategy;
  job.fsdp.cpu_offload = offload;
  job.fsdp.offload_params = offload && c.qlora;
  job.train.mixed_precision = c.mixed;
  fsdp::FsdpOptions options = fsdp::fsdp_options(job.fsdp, job.train, world_size(), world_size(),
                                                 testing_support::test_device(), /*lora=*/c.qlora);
  if (c.qlora) options.nf4_base = quant::Nf4Format{64, true};
  dist::ProcessGroups groups = testing_support::make_test_groups(options.shard_size);
  model::LlamaForCausalLM m(model::LlamaConfig::tiny(), at::TensorOptions().dtype(at::kFloat));
  model::init_weights(m, 7);
  if (c.qlora) model::add_lora(m, {8, 16.0, 0.0, {"all-linear"}}, 11);
  fsdp::FsdpLlama sharded(m, groups, options);
  Run run;
  for (fsdp::FlatParam* f : sharded.flat_params()) {
    const bool want = offload && (f->trainable() || c.qlora);
    run.offloaded_where_asked = run.offloaded_where_asked && f->offloaded() == want &&
                                f->shard().device().is_cpu() == (want || testing_support::test_device().is_cpu());
  }
  fsdp::AdamW optimizer({0.9, 0.999, 1e-8, 0.01});
  train::add_trainable_shards(sharded, optimizer);
  at::manual_seed(1000 + world_rank());
  const at::Tensor ids = at::randint(0, model::LlamaConfig::tiny().vocab_size, {2, 24}, at::kLong);
  for (int step = 0; step < 5; ++step)
    run.losses.push_back(train::train_step(sharded, optimizer, {{ids, ids, {}, 1.0, {}}}, {1e-2}, *groups.world).loss);
  run.params = sharded.gather_full_parameters();
  return run;
}

void expect_offload_changes_nothing(const Case& c) {
  SCOPED_TRACE(::testing::Message() << "strategy " << static_cast<int>(c.strategy) << (c.mixed ? " bf16" : " fp32")
                                    << (c.qlora ? " QLoRA" : ""));
  const Run plain = train(c, false), offloaded = train(c, true);
  EXPECT_TRUE(offloaded.offloaded_where_asked) << "a shard is not where cpu_offload puts it";
  EXPECT_EQ(plain.losses, offloaded.losses);
  ASSERT_EQ(plain.params.size(), offloaded.params.size());
  for (const auto& [name, value] : plain.params) EXPECT_TRUE(at::equal(value, offloaded.params.at(name))) << name;
  EXPECT_LT(plain.losses.back(), plain.losses.front()) << "nothing trained";
}

TEST(CpuOffload, FullFineTuneTrainsAsWithoutOffload) {
  expect_offload_changes_nothing({job::ShardingStrategy::kFullShard, false, false});
  expect_offload_changes_nothing({job::ShardingStrategy::kFullShard, true, false});
  expect_offload_changes_nothing({job::ShardingStrategy::kNoShard, false, false});
}

TEST(CpuOffload, QloraWithItsBaseOffloadedTrainsAsWithoutOffload) {
  expect_offload_changes_nothing({job::ShardingStrategy::kFullShard, true, true});
}

}  // namespace
}  // namespace shardtune
