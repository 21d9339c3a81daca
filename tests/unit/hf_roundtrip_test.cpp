// Hugging Face folders in and out: load → save reloads bit-identically (fixture folders and a
// random Llama 3.2-like model, sharded), and folders that disagree with config.json are refused
// with every problem named.
#include <ATen/ops/arange.h>
#include <ATen/ops/equal.h>
#include <ATen/ops/ones.h>
#include <ATen/ops/zeros.h>
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "checkpoint/hf/hf_model_io.h"
#include "checkpoint/hf/safetensors_torch.h"
#include "checkpoint/hf/weights_digest.h"
#include "common/error.h"
#include "runtime/model/init.h"

namespace shardtune::checkpoint {
namespace {

namespace fs = std::filesystem;

fs::path temp_dir(const std::string& name) {
  fs::path p = fs::temp_directory_path() / ("shardtune_" + name);
  fs::remove_all(p);
  fs::create_directories(p);
  return p;
}

model::LlamaConfig llama32_like() {
  model::LlamaConfig c = model::LlamaConfig::tiny();
  c.tie_word_embeddings = true;
  c.vocab_size = 1000;
  c.torch_dtype = "float32";
  return c;
}

// Every tensor of two folders is the same, bit for bit.
void expect_same_tensors(const HfFolder& a, const HfFolder& b) {
  ASSERT_EQ(a.tensor_names(), b.tensor_names());
  for (const std::string& name : a.tensor_names()) {
    const at::Tensor x = read_tensor(a.file_of(name), name), y = read_tensor(b.file_of(name), name);
    EXPECT_EQ(x.scalar_type(), y.scalar_type()) << name;
    EXPECT_TRUE(at::equal(x, y)) << name;
  }
}

TEST(HfRoundTrip, RandomLlama32LikeModelShardedSaveReloadsBitIdentically) {
  const fs::path dir = temp_dir("rt32");
  model::LlamaForCausalLM m(llama32_like(), at::TensorOptions().dtype(at::kFloat));
  model::init_weights(m, 5);
  save_hf_model(m, (dir / "a").string(), "", /*max_shard_bytes=*/200'000);
  const HfFolder a = HfFolder::open((dir / "a").string());
  EXPECT_TRUE(fs::exists(dir / "a" / kSafeWeightsIndexName));  // it was sharded
  const std::vector<std::string> names = a.tensor_names();
  EXPECT_EQ(std::count(names.begin(), names.end(), "lm_head.weight"), 0);  // tied

  model::LlamaForCausalLM loaded(read_hf_config(a), at::TensorOptions().dtype(at::kFloat));
  load_hf_weights(loaded, a);
  auto pa = m.named_parameters(), pb = loaded.named_parameters();
  ASSERT_EQ(pa.size(), pb.size());
  for (size_t i = 0; i < pa.size(); ++i) EXPECT_TRUE(at::equal(*pa[i].tensor, *pb[i].tensor)) << pa[i].name;

  save_hf_model(loaded, (dir / "b").string(), "", 200'000);
  expect_same_tensors(a, HfFolder::open((dir / "b").string()));
  fs::remove_all(dir);
}

// Every model folder under `root` (a LoRA reference folder: its base/), loaded into a model of its
// stored dtype and saved by shardtune, reloads bit-identically.
void expect_folders_round_trip(const fs::path& root) {
  for (const auto& e : fs::directory_iterator(root)) {
    if (!e.is_directory()) continue;  // a marker file beside the folders (the GPU check's .complete)
    const fs::path dir = fs::exists(e.path() / "base") ? e.path() / "base" : e.path();
    SCOPED_TRACE(dir.string());
    const HfFolder original = HfFolder::open(dir.string());
    const std::string first = original.tensor_names().front();
    const at::ScalarType stored = read_tensor(original.file_of(first), first).scalar_type();
    model::LlamaForCausalLM m(read_hf_config(original), at::TensorOptions().dtype(stored));
    load_hf_weights(m, original);
    const fs::path out = temp_dir("rtfix");
    save_hf_model(m, out.string(), "");
    expect_same_tensors(original, HfFolder::open(out.string()));
    fs::remove_all(out);
  }
}

TEST(HfRoundTrip, FixtureFoldersReloadBitIdentically) {
  const fs::path fixtures = fs::path(ST_FIXTURES) / "hf";
  if (!fs::exists(fixtures)) GTEST_SKIP() << "no fixtures under " << fixtures << " (tests/reference/make_llama_fixtures.py)";
  expect_folders_round_trip(fixtures);
}

// Folders written by another safetensors writer (tests/reference/llama_torch_reference.py, one
// of them sharded with an index).
TEST(TorchReference, FoldersReloadBitIdentically) {
  const char* root = std::getenv("SHARDTUNE_TORCH_REFERENCE");
  if (root == nullptr) GTEST_SKIP() << "SHARDTUNE_TORCH_REFERENCE is not set (ctest -R torch_reference sets it)";
  expect_folders_round_trip(root);
}

TEST(HfRoundTrip, MismatchesAreAllNamedBeforeAnyWeightIsRead) {
  const fs::path dir = temp_dir("mismatch");
  model::LlamaForCausalLM m(llama32_like(), at::TensorOptions().dtype(at::kFloat));
  model::init_weights(m, 5);
  std::vector<std::pair<std::string, at::Tensor>> tensors;
  for (const model::NamedParam& p : m.named_parameters()) {
    if (p.name == "model.layers.1.mlp.up_proj.weight") continue;  // missing
    at::Tensor t = p.tensor->detach();
    if (p.name == "model.norm.weight") t = t.narrow(0, 0, 10).contiguous();  // wrong shape
    if (p.name == "model.layers.0.input_layernorm.weight") t = t.to(at::kInt);  // not a float
    tensors.emplace_back(p.name, t);
  }
  tensors.emplace_back("model.layers.7.mlp.up_proj.weight", at::zeros({2, 2}));  // extra
  write_safetensors((dir / "model.safetensors").string(), tensors);
  std::ofstream(dir / "config.json") << m.config().to_json().dump();
  try {
    model::LlamaForCausalLM target(llama32_like(), at::TensorOptions().dtype(at::kFloat));
    load_hf_weights(target, HfFolder::open(dir.string()));
    FAIL() << "loaded a mismatched folder";
  } catch (const common::Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("4 problem(s)"), std::string::npos) << what;
    EXPECT_NE(what.find("missing tensor model.layers.1.mlp.up_proj.weight (shape [160, 64])"), std::string::npos) << what;
    EXPECT_NE(what.find("model.norm.weight has shape [10] in"), std::string::npos) << what;
    EXPECT_NE(what.find("but config.json implies [64]"), std::string::npos) << what;
    EXPECT_NE(what.find("model.layers.0.input_layernorm.weight is stored as I32"), std::string::npos) << what;
    EXPECT_NE(what.find("unexpected tensor model.layers.7.mlp.up_proj.weight"), std::string::npos) << what;
  }
  fs::remove_all(dir);
}

// Older Llama 2 conversions store each block's RoPE frequencies (rotary_emb.inv_freq), which
// transformers ignores: such a folder loads (whole, streamed into shards, and in the base
// identity) and its model gives the same logits, bit for bit, as the folder without them.
TEST(HfRoundTrip, AFolderWithRotaryFrequenciesLoadsAndGivesTheSameLogits) {
  const fs::path dir = temp_dir("inv_freq");
  model::LlamaForCausalLM m(llama32_like(), at::TensorOptions().dtype(at::kFloat));
  model::init_weights(m, 7);
  std::vector<std::pair<std::string, at::Tensor>> tensors;
  for (const model::NamedParam& p : m.named_parameters()) tensors.emplace_back(p.name, p.tensor->detach());
  const int64_t half = m.config().head_dim / 2;
  for (int64_t l = 0; l < m.config().num_hidden_layers; ++l)
    tensors.emplace_back(fmt::format("model.layers.{}.self_attn.rotary_emb.inv_freq", l), at::ones({half}));
  for (const char* name : {"plain", "hub"}) {
    fs::create_directories(dir / name);
    std::ofstream(dir / name / "config.json") << m.config().to_json().dump();
  }
  write_safetensors((dir / "hub" / "model.safetensors").string(), tensors);
  tensors.resize(tensors.size() - static_cast<size_t>(m.config().num_hidden_layers));
  write_safetensors((dir / "plain" / "model.safetensors").string(), tensors);

  const HfFolder hub = HfFolder::open((dir / "hub").string());
  EXPECT_EQ(check_hf_weights(m, hub).size(), static_cast<size_t>(m.config().num_hidden_layers));
  const at::Tensor ids = at::arange(12, at::kLong).reshape({2, 6});
  std::vector<at::Tensor> logits;
  for (const char* name : {"plain", "hub"}) {
    const HfFolder folder = HfFolder::open((dir / name).string());
    model::LlamaForCausalLM loaded(read_hf_config(folder), at::TensorOptions().dtype(at::kFloat));
    WeightsDigest digest(folder);
    load_hf_weights(loaded, folder, &digest);
    EXPECT_EQ(digest.hex().size(), 64u) << name;  // every identity tensor read, the frequencies not among them
    logits.push_back(loaded.forward(ids));
  }
  EXPECT_TRUE(at::equal(logits[0], logits[1]));
  fs::remove_all(dir);
}

}  // namespace
}  // namespace shardtune::checkpoint
