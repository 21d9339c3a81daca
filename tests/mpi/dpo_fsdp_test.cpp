// DPO under FSDP against the float64 plain-PyTorch reference (tests/reference/dpo_reference.py,
// made by the dpo_reference_make test): at this world size, for each sharding strategy and each
// loss (sigmoid, conservative sigmoid, IPO, hinge), every rank runs its share of the reference
// pairs through the sharded policy, the reference's log-probabilities from a frozen sharded copy
// (full fine-tuning) or from the policy with its adapters off (LoRA). The loss averaged over ranks,
// the rewards and every trained parameter's gradient match the reference within 1e-5 (relative,
// fp32 against fp64). The three ways to get the reference's numbers give the same loss, and
// gradient accumulation over 1, 2 or 4 micro-batches the same update.
#include <ATen/TensorOperators.h>
#include <ATen/core/grad_mode.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/stack.h>
#include <ATen/ops/zeros.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>

#include "checkpoint/hf/hf_model_io.h"
#include "checkpoint/hf/peft_adapter.h"
#include "checkpoint/hf/safetensors_torch.h"
#include "common/job/job.h"
#include "common/job/schema.h"
#include "runtime/fsdp/adamw.h"
#include "runtime/fsdp/fsdp_llama.h"
#include "runtime/model/lora.h"
#include "runtime/train/dpo.h"
#include "runtime/train/train_step.h"
#include "tests/mpi/test_device.h"
#include "tests/mpi/torch_reference_folders.h"

namespace shardtune {
namespace {

namespace fs = std::filesystem;

using testing_support::relative_error;

fs::path reference_root() {
  const char* root = std::getenv("SHARDTUNE_DPO_REFERENCE");
  return root == nullptr ? fs::path() : fs::path(root);
}

// A model of a folder, its parameters' values kept, and with `adapter` (a PEFT folder) its LoRA.
struct Loaded {
  std::unique_ptr<model::LlamaForCausalLM> model;
  std::set<std::string> frozen;
};

Loaded load(const fs::path& folder, const fs::path& adapter, bool freeze_all) {
  const checkpoint::HfFolder hf = checkpoint::HfFolder::open(folder.string());
  Loaded l;
  l.model = std::make_unique<model::LlamaForCausalLM>(checkpoint::read_hf_config(hf), at::TensorOptions().dtype(at::kFloat));
  checkpoint::load_hf_weights(*l.model, hf);
  if (!adapter.empty()) {
    const model::LoraSpec spec = checkpoint::read_peft_config(adapter.string()).lora;
    model::add_lora(*l.model, spec, 11);
    checkpoint::load_peft_adapter(*l.model, spec, adapter.string());
  }
  for (const model::NamedParam& p : l.model->named_parameters())
    if (freeze_all || (!adapter.empty() && !model::is_adapter_parameter(p.name))) l.frozen.insert(p.name);
  return l;
}

struct Setup {
  job::ShardingStrategy strategy = job::ShardingStrategy::kFullShard;
  int hsdp_shard = 0;
  bool checkpointing = false;
};

fsdp::FsdpOptions options_for(bool lora, const Setup& s) {
  job::FsdpSection fsdp_section;
  fsdp_section.sharding_strategy = s.strategy;
  fsdp_section.hsdp_shard_size = s.hsdp_shard;
  fsdp_section.activation_checkpointing = s.checkpointing;
  job::TrainSection train_section;
  train_section.mixed_precision = false;
  const int world = testing_support::world_size();
  return fsdp::fsdp_options(fsdp_section, train_section, world, world, testing_support::test_device(), lora);
}

// The policy and its reference for one folder, sharded.
struct Models {
  Models(const fs::path& dir, const Setup& s)
      : lora(fs::exists(dir / "adapter")),
        options(options_for(lora, s)),
        groups(testing_support::make_test_groups(options.shard_size)),
        policy(load(lora ? dir / "base" : dir / "policy", lora ? dir / "adapter" : fs::path(), false)),
        frozen(load(lora ? dir / "base" : dir / "reference", {}, true)),
        sharded(std::make_unique<fsdp::FsdpLlama>(*policy.model, groups, options, policy.frozen)),
        frozen_sharded(std::make_unique<fsdp::FsdpLlama>(*frozen.model, groups, options, frozen.frozen)) {}
  bool lora;
  fsdp::FsdpOptions options;
  dist::ProcessGroups groups;
  Loaded policy, frozen;
  std::unique_ptr<fsdp::FsdpLlama> sharded, frozen_sharded;
};

// This rank's pairs [first, first + count) of the reference's as a batch.
train::Batch pairs_batch(const checkpoint::SafetensorsFile& pairs, int64_t first, int64_t count) {
  const at::Tensor ids = checkpoint::read_tensor(pairs, "input_ids"), labels = checkpoint::read_tensor(pairs, "labels");
  const int64_t p = ids.size(0) / 2;
  train::Batch b;
  b.input_ids = at::cat({ids.narrow(0, first, count), ids.narrow(0, p + first, count)});
  b.labels = at::cat({labels.narrow(0, first, count), labels.narrow(0, p + first, count)});
  b.pairs = count;
  return b;
}

train::DpoOptions dpo_case(const nlohmann::json& c) {
  train::DpoOptions o;
  o.loss = *job::enum_value<job::DpoLossType>(c.at("loss_type").get<std::string>());
  o.beta = c.at("beta").get<double>();
  o.label_smoothing = c.at("label_smoothing").get<double>();
  return o;
}

nlohmann::json cases(const fs::path& dir) {
  std::ifstream in(dir / "cases.json");
  return nlohmann::json::parse(in);
}

void check_against_reference(const fs::path& dir, const Setup& s) {
  SCOPED_TRACE(dir.filename().string() + " strategy " + std::to_string(static_cast<int>(s.strategy)) +
               (s.checkpointing ? " checkpointing" : ""));
  const int rank = testing_support::world_rank(), world = testing_support::world_size();
  Models m(dir, s);
  const checkpoint::SafetensorsFile pairs = checkpoint::SafetensorsFile::open((dir / "pairs.safetensors").string());
  const int64_t total = checkpoint::read_tensor(pairs, "input_ids").size(0) / 2;
  ASSERT_EQ(total % world, 0);
  const int64_t mine = total / world;
  const train::Batch batch = pairs_batch(pairs, rank * mine, mine);
  const nlohmann::json all = cases(dir);
  for (const auto& [name, c] : all.items()) {
    SCOPED_TRACE(name);
    const checkpoint::SafetensorsFile ref = checkpoint::SafetensorsFile::open((dir / (name + ".safetensors")).string());
    train::PreferenceObjective objective{dpo_case(c), m.lora ? train::reference_without_adapters(*m.sharded)
                                                             : train::reference_model(*m.frozen_sharded)};
    at::Tensor sums = at::zeros({train::kDpoSums}, at::TensorOptions().dtype(at::kDouble).device(m.sharded->device()));
    const at::Tensor loss = train::dpo_batch_loss(*m.sharded, batch, {}, objective, &sums);
    loss.backward();
    m.sharded->finish_grad_sync();
    at::Tensor mean = loss.detach().to(at::kDouble).reshape({1});
    m.groups.world->all_reduce(mean, dist::ReduceOp::kAvg);
    EXPECT_LT(relative_error(mean.reshape({}), checkpoint::read_tensor(ref, "loss")), 1e-5);
    at::Tensor host = sums.cpu();
    m.groups.world->all_reduce(host, dist::ReduceOp::kSum);
    const train::PreferenceMetrics got = train::preference_metrics(host.data_ptr<double>());
    const at::Tensor chosen = checkpoint::read_tensor(ref, "chosen_rewards").to(at::kDouble);
    const at::Tensor rejected = checkpoint::read_tensor(ref, "rejected_rewards").to(at::kDouble);
    EXPECT_EQ(got.pairs, total);
    const double scale = std::max(chosen.abs().max().item<double>(), 1e-3);
    EXPECT_NEAR(got.rewards_chosen, chosen.mean().item<double>(), 1e-5 * scale);
    EXPECT_NEAR(got.rewards_rejected, rejected.mean().item<double>(), 1e-5 * scale);
    EXPECT_NEAR(got.rewards_margins, (chosen - rejected).mean().item<double>(), 2e-5 * scale);
    EXPECT_DOUBLE_EQ(got.rewards_accuracies, chosen.gt(rejected).to(at::kDouble).mean().item<double>());
    const at::Tensor logps = checkpoint::read_tensor(ref, "policy_logps").to(at::kDouble);
    if (!dpo_case(c).averages()) {
      EXPECT_NEAR(got.logps_chosen, logps.narrow(0, 0, total).mean().item<double>(),
                  1e-5 * logps.abs().max().item<double>());
    }
    int compared = 0;
    for (fsdp::FlatParam* f : m.sharded->flat_params()) {
      if (!f->trainable()) continue;
      const fsdp::FlatLayout& layout = f->layout();
      at::Tensor full = at::empty({layout.padded_numel()}, f->grad_shard().options());
      m.groups.shard->all_gather(f->grad_shard(), full);
      for (const fsdp::ParamSpan& p : layout.params()) {
        ++compared;
        EXPECT_LT(relative_error(full.narrow(0, p.offset, p.numel).view(p.shape),
                                 checkpoint::read_tensor(ref, "grad." + p.name)),
                  1e-5)
            << p.name;
      }
    }
    EXPECT_GE(compared, m.lora ? 8 : 20);
    m.sharded->zero_grad();
  }
}

TEST(DpoFsdp, LossRewardsAndGradientsMatchTheFloat64ReferenceForEveryStrategy) {
  if (reference_root().empty()) GTEST_SKIP() << "SHARDTUNE_DPO_REFERENCE is not set";
  const int world = testing_support::world_size();
  for (const char* folder : {"dpo-full", "dpo-lora"}) {
    const fs::path dir = reference_root() / folder;
    check_against_reference(dir, {job::ShardingStrategy::kFullShard});
    check_against_reference(dir, {job::ShardingStrategy::kShardGradOp});
    check_against_reference(dir, {job::ShardingStrategy::kNoShard});
    if (world % 2 == 0) check_against_reference(dir, {job::ShardingStrategy::kHybridShard, world / 2});
    check_against_reference(dir, {job::ShardingStrategy::kFullShard, 0, /*checkpointing=*/true});
  }
}

// LoRA: the base with the adapters switched off, a frozen sharded copy of the base, and the
// log-probabilities computed once beforehand give one loss.
TEST(DpoFsdp, TheThreeReferencesGiveTheSameLoss) {
  if (reference_root().empty()) GTEST_SKIP() << "SHARDTUNE_DPO_REFERENCE is not set";
  const fs::path dir = reference_root() / "dpo-lora";
  const int rank = testing_support::world_rank(), world = testing_support::world_size();
  Models m(dir, {});
  const checkpoint::SafetensorsFile pairs = checkpoint::SafetensorsFile::open((dir / "pairs.safetensors").string());
  const int64_t mine = checkpoint::read_tensor(pairs, "input_ids").size(0) / 2 / world;
  train::Batch batch = pairs_batch(pairs, rank * mine, mine);
  const nlohmann::json all = cases(dir);
  for (const auto& [name, c] : all.items()) {
    SCOPED_TRACE(name);
    const train::DpoOptions o = dpo_case(c);
    at::NoGradGuard no_grad;
    const at::Tensor base = train::dpo_batch_loss(*m.sharded, batch, {}, {o, train::reference_without_adapters(*m.sharded)}, nullptr);
    const at::Tensor copy = train::dpo_batch_loss(*m.sharded, batch, {}, {o, train::reference_model(*m.frozen_sharded)}, nullptr);
    const at::Tensor logps = train::reference_without_adapters(*m.sharded)(batch).cpu();
    train::Batch precomputed = batch;
    precomputed.reference_logps = at::stack({logps.narrow(0, 0, mine), logps.narrow(0, mine, mine)}, 1);
    const at::Tensor stored = train::dpo_batch_loss(*m.sharded, precomputed, {}, {o, nullptr}, nullptr);
    EXPECT_LT(relative_error(copy, base), 1e-6);
    EXPECT_LT(relative_error(stored, base), 1e-6);
    // And each is the reference's.
    const checkpoint::SafetensorsFile ref = checkpoint::SafetensorsFile::open((dir / (name + ".safetensors")).string());
    at::Tensor mean = base.to(at::kDouble).reshape({1}).cpu();
    m.groups.world->all_reduce(mean, dist::ReduceOp::kAvg);
    EXPECT_LT(relative_error(mean.reshape({}), checkpoint::read_tensor(ref, "loss")), 1e-5);
  }
}

// One step of the same pairs as 1 to 4 micro-batches (reduced at each or only at the last): the
// same loss, metrics and gradients, within fp32 rounding of sums taken in another order.
TEST(DpoFsdp, GradientAccumulationSplitsGiveTheSameStep) {
  if (reference_root().empty()) GTEST_SKIP() << "SHARDTUNE_DPO_REFERENCE is not set";
  const fs::path dir = reference_root() / "dpo-full";
  const int rank = testing_support::world_rank(), world = testing_support::world_size();
  const nlohmann::json all = cases(dir);
  struct Seen {
    double loss = 0, margin = 0, logps = 0;
    std::map<std::string, at::Tensor> grads;
  };
  std::map<int, Seen> seen;
  for (int micro : {1, 2, 3, 4}) {
    const int64_t per_rank = 12 / world;
    if (per_rank % micro != 0) continue;
    Models m(dir, {});
    fsdp::AdamW optimizer({0.9, 0.999, 1e-8, 0.0});
    train::add_trainable_shards(*m.sharded, optimizer);
    const checkpoint::SafetensorsFile pairs = checkpoint::SafetensorsFile::open((dir / "pairs.safetensors").string());
    std::vector<train::Batch> batches;
    for (int i = 0; i < micro; ++i)
      batches.push_back(pairs_batch(pairs, rank * per_rank + i * per_rank / micro, per_rank / micro));
    const train::PreferenceObjective objective{dpo_case(all.at("sigmoid")), train::reference_model(*m.frozen_sharded)};
    train::StepOptions step{1e-3};
    step.preference = &objective;
    step.reduce_every_micro_batch = micro == 2;  // both ways of reducing
    Seen& s = seen[micro];
    step.before_update = [&] {  // the step's gradients, whole, before the optimizer uses them
      for (fsdp::FlatParam* f : m.sharded->flat_params()) {
        if (!f->trainable()) continue;
        at::Tensor full = at::empty({f->layout().padded_numel()}, f->grad_shard().options());
        m.groups.shard->all_gather(f->grad_shard(), full);
        for (const fsdp::ParamSpan& p : f->layout().params()) s.grads[p.name] = full.narrow(0, p.offset, p.numel).cpu();
      }
    };
    const train::StepResult r = train::train_step(*m.sharded, optimizer, batches, step, *m.groups.world);
    ASSERT_TRUE(r.preference.has_value());
    EXPECT_EQ(r.preference->pairs, 12);
    s.loss = r.loss;
    s.margin = r.preference->rewards_margins;
    s.logps = r.preference->logps_chosen;
  }
  ASSERT_GE(seen.size(), 2u);
  const Seen& one = seen.begin()->second;
  for (const auto& [micro, s] : seen) {
    SCOPED_TRACE(std::to_string(micro) + " micro-batches");
    EXPECT_NEAR(s.loss, one.loss, 1e-6 * std::abs(one.loss));
    // The margin is a difference of rewards, each beta times a difference of log-probabilities of
    // some tens: rounding of sums in another order, relative to those.
    EXPECT_NEAR(s.margin, one.margin, 1e-6 * all.at("sigmoid").at("beta").get<double>() * std::abs(one.logps));
    EXPECT_NEAR(s.logps, one.logps, 1e-6 * std::abs(one.logps));
    for (const auto& [name, g] : s.grads) EXPECT_LT(relative_error(g, one.grads.at(name)), 1e-5) << name;
  }
}

}  // namespace
}  // namespace shardtune
