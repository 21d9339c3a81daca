// QLoRA under FSDP against the plain-PyTorch reference (tests/reference/llama_torch_reference.py,
// qlora-* folders: LoRA on the base's projections quantised by the numpy NF4 reference and
// dequantised): at this world size and for every sharding strategy,
//  - each NF4 weight, gathered, is bitwise the reference's dequantised weight, whether quantised
//    from full values or streamed from the folder (each rank quantising only its records, the
//    offsets agreed afterwards);
//  - the loss and every adapter gradient match the reference within 1e-5 (fp32);
//  - the base's all-gathers move packed records: bytes on the wire against the bf16 base;
//  - after AdamW steps the packed base bytes are unchanged and the adapters have trained.
#include <ATen/TensorOperators.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/equal.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "checkpoint/hf/hf_model_io.h"
#include "checkpoint/hf/hf_tensor_source.h"
#include "checkpoint/hf/peft_adapter.h"
#include "checkpoint/hf/safetensors_torch.h"
#include "common/job/job.h"
#include "runtime/fsdp/adamw.h"
#include "runtime/fsdp/fsdp_llama.h"
#include "runtime/fsdp/shard_loader.h"
#include "runtime/model/lora.h"
#include "runtime/model/loss.h"
#include "runtime/train/train_step.h"
#include "tests/mpi/test_device.h"
#include "tests/mpi/torch_reference_folders.h"

namespace shardtune {
namespace {

namespace fs = std::filesystem;

using testing_support::relative_error;

std::vector<fs::path> qlora_folders() { return testing_support::adapter_reference_folders(/*qlora=*/true); }

int world_size() {
  int w = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &w);
  return w;
}

struct Case {
  job::ShardingStrategy strategy = job::ShardingStrategy::kFullShard;
  int hsdp_shard = 0;
  bool checkpointing = false;
  bool streamed = false;  // the base streamed from the folder into empty shards
  std::string base = "base";  // base-nf4: the folder bitsandbytes would write, records read as stored
};

void run_case(const fs::path& dir, const Case& c) {
  SCOPED_TRACE(dir.string() + " strategy " + std::to_string(static_cast<int>(c.strategy)) +
               (c.checkpointing ? " checkpointing" : "") + (c.streamed ? " streamed" : ""));
  int rank = 0, world = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  const nlohmann::json q = nlohmann::json::parse(std::ifstream(dir / "qlora.json"));
  job::FsdpSection fsdp_section;
  fsdp_section.sharding_strategy = c.strategy;
  fsdp_section.hsdp_shard_size = c.hsdp_shard;
  fsdp_section.activation_checkpointing = c.checkpointing;
  job::TrainSection train_section;
  train_section.mixed_precision = false;  // fp32: the reference's dequantised weights exactly
  fsdp::FsdpOptions options =
      fsdp::fsdp_options(fsdp_section, train_section, world, world, testing_support::test_device(), true);
  options.nf4_base = quant::Nf4Format{q["block_size"].get<int64_t>(), q["double_quant"].get<bool>()};
  dist::ProcessGroups groups = testing_support::make_test_groups(options.shard_size);

  const std::string base = (dir / c.base).string();
  const checkpoint::HfFolder folder = checkpoint::HfFolder::open(base);
  const at::TensorOptions where = c.streamed ? at::TensorOptions().device(at::kMeta) : at::TensorOptions();
  model::LlamaForCausalLM m(checkpoint::read_hf_config(folder), where.dtype(at::kFloat));
  if (c.streamed)
    fsdp::validate_source(m, [base] { return std::make_unique<checkpoint::HfTensorSource>(base); }, *groups.world,
                          options.nf4_base);
  if (!c.streamed) checkpoint::load_hf_weights(m, folder);
  const checkpoint::PeftAdapterConfig adapter = checkpoint::read_peft_config((dir / "adapter").string());
  model::add_lora(m, adapter.lora, 11);
  checkpoint::load_peft_adapter(m, adapter.lora, (dir / "adapter").string());
  std::set<std::string> frozen;
  for (const model::NamedParam& p : m.named_parameters())
    if (!model::is_adapter_parameter(p.name)) frozen.insert(p.name);
  fsdp::FsdpLlama sharded(m, groups, options, frozen);
  if (c.streamed)
    fsdp::load_shards(sharded, [base] { return std::make_unique<checkpoint::HfTensorSource>(base); });

  // NF4 flats: the seven projections of each block, uint8 records; their gathers carry the records.
  int nf4_flats = 0;
  std::map<fsdp::FlatParam*, at::Tensor> packed;
  for (fsdp::FlatParam* f : sharded.flat_params()) {
    if (!f->nf4()) continue;
    ++nf4_flats;
    EXPECT_EQ(f->shard().scalar_type(), at::kByte);
    EXPECT_EQ(f->layout().params().size(), 7u);
    packed[f] = f->shard().clone();
  }
  EXPECT_EQ(nf4_flats, m.num_layers());

  // Every NF4 weight, gathered and dequantised, is the reference's bitwise.
  const checkpoint::SafetensorsFile ref = checkpoint::SafetensorsFile::open((dir / "reference.safetensors").string());
  std::map<std::string, at::Tensor> full = sharded.gather_full_parameters();
  int dequantized = 0;
  for (const auto& [name, value] : full) {
    if (!quant::is_nf4_weight(name)) continue;
    ++dequantized;
    const at::Tensor want = checkpoint::read_tensor(ref, "dequantized." + name), got = value.to(at::kCPU);
    EXPECT_TRUE(at::equal(got, want)) << name << ": largest difference " << (got - want).abs().max().item<double>()
                                      << " at element " << (got - want).abs().reshape({-1}).argmax().item<int64_t>()
                                      << " of " << got.numel();
  }
  EXPECT_EQ(dequantized, 7 * m.num_layers());

  fsdp::AdamW optimizer({0.9, 0.999, 1e-8, 0.0});
  train::add_trainable_shards(sharded, optimizer);
  const at::Tensor ids = checkpoint::read_tensor(ref, "input_ids");
  ASSERT_EQ(ids.size(0) % world, 0);
  const int64_t rows = ids.size(0) / world;
  const at::Tensor mine = ids.narrow(0, rank * rows, rows);
  const at::Tensor labels = checkpoint::read_tensor(ref, "labels").narrow(0, rank * rows, rows);
  std::map<fsdp::FlatParam*, int64_t> gathered_before;
  for (const auto& [f, bytes] : packed) gathered_before[f] = f->wire_bytes().gathered;
  const at::Tensor loss = model::causal_lm_loss(sharded.forward(mine), labels.to(sharded.device()));
  loss.backward();
  sharded.finish_grad_sync();
  // Each of an NF4 flat's gathers (forward, and backward again when resharded) moved exactly every
  // rank's records: packed, nothing dequantised on the wire.
  const int64_t gathers = options.reshard_after_forward ? 2 : 1;
  for (const auto& [f, bytes] : packed)
    EXPECT_EQ(f->wire_bytes().gathered - gathered_before[f],
              groups.shard->size() > 1 ? gathers * bytes.numel() * groups.shard->size() : 0);
  at::Tensor mean = loss.detach().to(at::kDouble).reshape({1});
  groups.world->all_reduce(mean, dist::ReduceOp::kAvg);
  EXPECT_LT(relative_error(mean.to(at::kFloat).reshape({}), checkpoint::read_tensor(ref, "loss")), 1e-5);
  int compared = 0;
  for (fsdp::FlatParam* f : sharded.flat_params()) {
    if (!f->trainable()) continue;
    const fsdp::FlatLayout& layout = f->layout();
    at::Tensor grads = at::empty({layout.padded_numel()}, f->grad_shard().options());
    groups.shard->all_gather(f->grad_shard(), grads);
    for (const fsdp::ParamSpan& p : layout.params()) {
      ++compared;
      EXPECT_LT(relative_error(grads.narrow(0, p.offset, p.numel).view(p.shape), checkpoint::read_tensor(ref, "grad." + p.name)),
                1e-5)
          << p.name;
    }
  }
  EXPECT_GE(compared, 8);

  // Training moves the adapters; the packed base stays byte for byte.
  optimizer.step(1e-2);
  sharded.zero_grad();
  const train::Batch batch{mine, labels, {}, 1.0, {}};
  for (int i = 0; i < 2; ++i) train::train_step(sharded, optimizer, {batch}, train::StepOptions{1e-2}, *groups.world);
  for (const auto& [f, bytes] : packed) EXPECT_TRUE(at::equal(f->shard(), bytes)) << "the packed base changed";
  const std::map<std::string, at::Tensor> after = sharded.gather_full_parameters();
  for (const auto& [name, value] : after) {
    if (model::is_adapter_parameter(name)) {
      EXPECT_FALSE(at::equal(value, full.at(name))) << name << " did not train";
    }
  }
}

TEST(QloraFsdp, LossAndAdapterGradientsMatchTheTorchReferenceForEveryStrategy) {
  const auto folders = qlora_folders();
  if (folders.empty()) GTEST_SKIP() << "SHARDTUNE_TORCH_REFERENCE is not set or holds no QLoRA folder";
  for (const fs::path& dir : folders) {
    run_case(dir, {job::ShardingStrategy::kFullShard});
    run_case(dir, {job::ShardingStrategy::kShardGradOp});
    run_case(dir, {job::ShardingStrategy::kNoShard});
    if (world_size() % 2 == 0) run_case(dir, {job::ShardingStrategy::kHybridShard, world_size() / 2});
    run_case(dir, {job::ShardingStrategy::kFullShard, 0, /*checkpointing=*/true});
  }
}

TEST(QloraFsdp, StreamedBaseIsQuantisedAsFromFullValues) {
  const auto folders = qlora_folders();
  if (folders.empty()) GTEST_SKIP() << "SHARDTUNE_TORCH_REFERENCE is not set or holds no QLoRA folder";
  run_case(folders.front(), {job::ShardingStrategy::kFullShard, 0, false, /*streamed=*/true});
  if (world_size() % 2 == 0)
    run_case(folders.front(), {job::ShardingStrategy::kHybridShard, world_size() / 2, false, /*streamed=*/true});
}

// A folder stored in 4 bits as bitsandbytes writes it (made by the numpy reference from the same
// base): each rank reads its records as stored, and every weight, loss and gradient is the one of
// quantising the original.
TEST(QloraFsdp, APrequantisedFolderGivesTheWeightsOfQuantisingItsOriginal) {
  const auto folders = qlora_folders();
  if (folders.empty()) GTEST_SKIP() << "SHARDTUNE_TORCH_REFERENCE is not set or holds no QLoRA folder";
  run_case(folders.front(), {job::ShardingStrategy::kFullShard, 0, false, /*streamed=*/true, "base-nf4"});
  run_case(folders.front(), {job::ShardingStrategy::kShardGradOp, 0, true, /*streamed=*/true, "base-nf4"});
}

}  // namespace
}  // namespace shardtune
