// LoRA under FSDP against the plain-PyTorch LoRA reference (tests/reference/llama_torch_reference.py,
// made by the torch_reference_make test): at this world size and for every sharding strategy,
// each rank runs its share of the reference batch through the sharded model (base frozen,
// adapters trainable). The loss averaged over ranks and every adapter's gradient, gathered from
// its shards, match the reference within 1e-5 (fp32); only adapter gradients go on the wire
// (counted bytes against the adapters' sizes); and after AdamW steps every base weight is bitwise
// what was loaded. bf16 mixed precision keeps the frozen base in bf16 with no fp32 copy.
#include <ATen/TensorOperators.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/equal.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <map>
#include <set>

#include "checkpoint/hf/hf_model_io.h"
#include "checkpoint/hf/peft_adapter.h"
#include "checkpoint/hf/safetensors_torch.h"
#include "common/job/job.h"
#include "runtime/fsdp/adamw.h"
#include "runtime/fsdp/fsdp_llama.h"
#include "runtime/model/lora.h"
#include "runtime/model/loss.h"
#include "runtime/train/train_step.h"
#include "tests/mpi/test_device.h"
#include "tests/mpi/torch_reference_folders.h"

namespace shardtune {
namespace {

namespace fs = std::filesystem;

using testing_support::relative_error;

std::vector<fs::path> lora_folders() { return testing_support::adapter_reference_folders(/*qlora=*/false); }

struct Case {
  job::ShardingStrategy strategy = job::ShardingStrategy::kFullShard;
  int hsdp_shard = 0;
  bool checkpointing = false;
  bool bf16 = false;
  double dropout = 0.0;                               // of the adapters while training
  std::map<std::string, at::Tensor>* trained = nullptr;  // receives every parameter after training
};

void run_case(const fs::path& dir, const Case& c) {
  SCOPED_TRACE(dir.string() + " strategy " + std::to_string(static_cast<int>(c.strategy)) +
               (c.bf16 ? " bf16" : "") + (c.checkpointing ? " checkpointing" : ""));
  int rank = 0, world = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  job::FsdpSection fsdp_section;
  fsdp_section.sharding_strategy = c.strategy;
  fsdp_section.hsdp_shard_size = c.hsdp_shard;
  fsdp_section.activation_checkpointing = c.checkpointing;
  job::TrainSection train_section;
  train_section.mixed_precision = c.bf16;
  const fsdp::FsdpOptions options =
      fsdp::fsdp_options(fsdp_section, train_section, world, world, testing_support::test_device(), /*lora=*/true);
  dist::ProcessGroups groups = testing_support::make_test_groups(options.shard_size);

  const checkpoint::HfFolder folder = checkpoint::HfFolder::open((dir / "base").string());
  model::LlamaForCausalLM m(checkpoint::read_hf_config(folder), at::TensorOptions().dtype(at::kFloat));
  checkpoint::load_hf_weights(m, folder);
  const checkpoint::PeftAdapterConfig adapter = checkpoint::read_peft_config((dir / "adapter").string());
  model::LoraSpec spec = adapter.lora;
  spec.dropout = c.dropout;
  model::add_lora(m, spec, 11);
  checkpoint::load_peft_adapter(m, spec, (dir / "adapter").string());
  std::set<std::string> frozen;
  std::map<std::string, at::Tensor> initial;
  for (const model::NamedParam& p : m.named_parameters()) {
    initial[p.name] = p.tensor->detach().clone();
    if (!model::is_adapter_parameter(p.name)) frozen.insert(p.name);
  }
  fsdp::FsdpLlama sharded(m, groups, options, frozen);

  // The frozen base: no gradient shard, its own dtype (the compute dtype), no optimizer state.
  fsdp::AdamW optimizer({0.9, 0.999, 1e-8, 0.0});
  train::add_trainable_shards(sharded, optimizer);
  int64_t adapter_shard = 0;
  for (fsdp::FlatParam* f : sharded.flat_params()) {
    for (const fsdp::ParamSpan& p : f->layout().params())
      EXPECT_EQ(f->trainable(), model::is_adapter_parameter(p.name)) << p.name;
    if (f->trainable()) {
      adapter_shard += f->shard().numel();
      EXPECT_EQ(f->shard().scalar_type(), at::kFloat);
    } else {
      EXPECT_FALSE(f->grad_shard().defined());
      EXPECT_EQ(f->shard().scalar_type(), c.bf16 ? at::kBFloat16 : at::kFloat);
    }
  }
  EXPECT_EQ(optimizer.state_bytes(), 2 * 4 * adapter_shard);

  // This rank's rows of the reference batch.
  const checkpoint::SafetensorsFile ref = checkpoint::SafetensorsFile::open((dir / "reference.safetensors").string());
  const at::Tensor ids = checkpoint::read_tensor(ref, "input_ids");
  ASSERT_EQ(ids.size(0) % world, 0) << "the reference batch does not split evenly over " << world << " ranks";
  const int64_t rows = ids.size(0) / world;
  const at::Tensor mine = ids.narrow(0, rank * rows, rows);
  const at::Tensor labels = checkpoint::read_tensor(ref, "labels").narrow(0, rank * rows, rows);

  const fsdp::FlatParam::WireBytes before = sharded.wire_bytes();
  const at::Tensor loss = model::causal_lm_loss(sharded.forward(mine), labels.to(sharded.device()));
  loss.backward();
  sharded.finish_grad_sync();
  at::Tensor mean = loss.detach().to(at::kDouble).reshape({1});
  groups.world->all_reduce(mean, dist::ReduceOp::kAvg);
  const double tolerance = c.bf16 ? 3e-2 : 1e-5;
  EXPECT_LT(relative_error(mean.to(at::kFloat).reshape({}), checkpoint::read_tensor(ref, "loss")), tolerance);

  // Every adapter's gradient, gathered from the shards of its flat parameter.
  int compared = 0;
  int64_t reduced = 0;  // the bytes the adapters' reduction must have put on the wire
  for (fsdp::FlatParam* f : sharded.flat_params()) {
    if (!f->trainable()) continue;
    const fsdp::FlatLayout& layout = f->layout();
    if (groups.shard->size() > 1) reduced += layout.padded_numel() * 4;
    if (groups.replicate->size() > 1) reduced += layout.shard_numel() * 4;
    at::Tensor full = at::empty({layout.padded_numel()}, f->grad_shard().options());
    groups.shard->all_gather(f->grad_shard(), full);
    for (const fsdp::ParamSpan& p : layout.params()) {
      ++compared;
      EXPECT_LT(relative_error(full.narrow(0, p.offset, p.numel).view(p.shape), checkpoint::read_tensor(ref, "grad." + p.name)),
                c.bf16 ? 6e-2 : 1e-5)
          << p.name;
    }
  }
  EXPECT_GE(compared, 10);
  EXPECT_EQ(sharded.wire_bytes().reduced - before.reduced, reduced) << "only the adapters' gradients are reduced";

  // Training moves the adapters and leaves every base weight bitwise as loaded.
  optimizer.step(1e-2);
  sharded.zero_grad();
  const train::Batch batch{mine, labels, {}, 1.0, {}};
  train::StepOptions step{1e-2};
  step.dropout = {true, 5};
  for (int i = 0; i < 2; ++i) train::train_step(sharded, optimizer, {batch}, step, *groups.world);
  const std::map<std::string, at::Tensor> after = sharded.gather_full_parameters();
  for (const auto& [name, value] : initial) {
    if (frozen.count(name)) {
      const at::Tensor loaded = c.bf16 ? value.to(at::kBFloat16).to(at::kFloat) : value;  // as the shard holds it
      EXPECT_TRUE(at::equal(after.at(name).to(at::kFloat), loaded)) << "base weight " << name << " changed";
    } else {
      EXPECT_FALSE(at::equal(after.at(name), value)) << "adapter " << name << " did not train";
    }
  }
  if (c.trained != nullptr) *c.trained = after;
}

int world_size() {
  int w = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &w);
  return w;
}

TEST(LoraFsdp, LossAndAdapterGradientsMatchTheTorchReferenceForEveryStrategy) {
  const auto folders = lora_folders();
  if (folders.empty()) GTEST_SKIP() << "SHARDTUNE_TORCH_REFERENCE is not set or holds no LoRA folder";
  for (const fs::path& dir : folders) {
    run_case(dir, {job::ShardingStrategy::kFullShard});
    run_case(dir, {job::ShardingStrategy::kShardGradOp});
    run_case(dir, {job::ShardingStrategy::kNoShard});
    if (world_size() % 2 == 0) run_case(dir, {job::ShardingStrategy::kHybridShard, world_size() / 2});
    run_case(dir, {job::ShardingStrategy::kFullShard, 0, /*checkpointing=*/true});
  }
}

// Dropout masks come from a key, so a block recomputed for activation checkpointing draws the same
// ones: training with dropout is bitwise the same with and without checkpointing, and differs
// from training without dropout.
TEST(LoraFsdp, DropoutDrawsTheSameMasksWhenActivationCheckpointingRecomputes) {
  const auto folders = lora_folders();
  if (folders.empty()) GTEST_SKIP() << "SHARDTUNE_TORCH_REFERENCE is not set or holds no LoRA folder";
  std::map<std::string, at::Tensor> kept, recomputed, without;
  run_case(folders.front(), {job::ShardingStrategy::kFullShard, 0, false, false, 0.3, &kept});
  run_case(folders.front(), {job::ShardingStrategy::kFullShard, 0, true, false, 0.3, &recomputed});
  run_case(folders.front(), {job::ShardingStrategy::kFullShard, 0, false, false, 0.0, &without});
  int adapters = 0, changed_by_dropout = 0;
  for (const auto& [name, value] : kept) {
    if (!model::is_adapter_parameter(name)) continue;
    ++adapters;
    EXPECT_TRUE(at::equal(value, recomputed.at(name))) << name << " differs when checkpointing recomputes";
    changed_by_dropout += at::equal(value, without.at(name)) ? 0 : 1;
  }
  EXPECT_GE(adapters, 10);
  EXPECT_GT(changed_by_dropout, adapters / 2) << "dropout 0.3 left the training as without dropout";
}

TEST(LoraFsdp, Bf16KeepsTheFrozenBaseInBf16AndStaysWithinItsBound) {
  const auto folders = lora_folders();
  if (folders.empty()) GTEST_SKIP() << "SHARDTUNE_TORCH_REFERENCE is not set or holds no LoRA folder";
  run_case(folders.front(), {job::ShardingStrategy::kFullShard, 0, false, /*bf16=*/true});
}

}  // namespace
}  // namespace shardtune
