// Hugging Face model folders: sharding and naming as transformers does them, reading every tensor
// back bit-identically, tokenizer files, and the errors of inconsistent folders.
#include <ATen/ops/randn.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "checkpoint/hf/hf_folder.h"
#include "checkpoint/hf/hf_writer.h"
#include "checkpoint/hf/safetensors_torch.h"
#include "common/error.h"

#include "tests/unit/temp_dir.h"

namespace shardtune::checkpoint {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

using testing_support::TempDir;

std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

void write_text(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
}

at::Tensor randn(std::vector<int64_t> shape, at::ScalarType type) {
  return at::randn(shape, at::TensorOptions().dtype(at::kFloat)).to(type);
}

void expect_bit_identical(const at::Tensor& expected, const at::Tensor& actual, const std::string& what) {
  SCOPED_TRACE(what);
  ASSERT_EQ(expected.scalar_type(), actual.scalar_type());
  ASSERT_EQ(expected.sizes().vec(), actual.sizes().vec());
  const at::Tensor e = expected.contiguous();
  ASSERT_EQ(e.nbytes(), actual.nbytes());
  if (e.nbytes() > 0) {
    EXPECT_EQ(0, std::memcmp(e.data_ptr(), actual.data_ptr(), e.nbytes()));
  }
}

const json kConfig = {{"architectures", {"LlamaForCausalLM"}}, {"hidden_size", 16}, {"num_hidden_layers", 2},
                      {"rope_theta", 500000.0}, {"torch_dtype", "bfloat16"}};

// Byte sizes: 400, 400, 256, 3000 (over the limit), 128, 512, 64; limit 1000. transformers'
// rule (new shard when the next tensor would overflow the current one) gives
// {embed, layer0.q} {layer0.k, huge} ... worked out below by hand.
std::vector<std::pair<std::string, at::Tensor>> model_tensors() {
  return {
      {"model.embed_tokens.weight", randn({10, 10}, at::kFloat)},          // 400
      {"model.layers.0.self_attn.q_proj.weight", randn({10, 20}, at::kBFloat16)},  // 400
      {"model.layers.0.self_attn.k_proj.weight", randn({8, 16}, at::kHalf)},       // 256
      {"model.layers.1.mlp.up_proj.weight", randn({750}, at::kFloat)},             // 3000
      {"model.layers.1.input_layernorm.weight", randn({16}, at::kDouble)},         // 128
      {"model.norm.weight", randn({128}, at::kFloat)},                             // 512
      {"lm_head.weight", randn({4, 8}, at::kBFloat16)},                            // 64
  };
}

TEST(HfFolderTest, ShardsLikeTransformersAndReadsBackBitIdentical) {
  TempDir tmp("hf_folder_test");
  const std::string dir = tmp.file("model");
  const auto tensors = model_tensors();
  write_hf_folder(dir, tensors, kConfig, "", 1000);

  // 400+400 = 800; +256 would be 1056 > 1000 -> new shard; 256+3000 > 1000 -> the large tensor
  // alone; 128+512+64 = 704.
  const std::vector<std::vector<std::string>> expected_shards = {
      {"model.embed_tokens.weight", "model.layers.0.self_attn.q_proj.weight"},
      {"model.layers.0.self_attn.k_proj.weight"},
      {"model.layers.1.mlp.up_proj.weight"},
      {"model.layers.1.input_layernorm.weight", "model.norm.weight", "lm_head.weight"},
  };
  EXPECT_FALSE(fs::exists(fs::path(dir) / "model.safetensors"));
  for (size_t i = 0; i < expected_shards.size(); ++i) {
    const std::string name = fmt::format("model-{:05d}-of-00004.safetensors", i + 1);
    SCOPED_TRACE(name);
    const SafetensorsFile shard = SafetensorsFile::open((fs::path(dir) / name).string());
    std::vector<std::string> names;
    for (const TensorInfo& t : shard.tensors()) names.push_back(t.name);
    EXPECT_EQ(names, expected_shards[i]);
    EXPECT_EQ(shard.metadata(), (std::map<std::string, std::string>{{"format", "pt"}}));
  }
  EXPECT_FALSE(fs::exists(fs::path(dir) / "model-00005-of-00004.safetensors"));

  const std::string index_text = read_text(fs::path(dir) / "model.safetensors.index.json");
  const json index = json::parse(index_text);
  EXPECT_EQ(index["metadata"]["total_size"], 400 + 400 + 256 + 3000 + 128 + 512 + 64);
  EXPECT_EQ(index["weight_map"].size(), tensors.size());
  EXPECT_EQ(index["weight_map"]["model.layers.1.mlp.up_proj.weight"], "model-00003-of-00004.safetensors");
  // Sorted by name in the file text itself, as transformers writes it.
  EXPECT_LT(index_text.find("\"lm_head.weight\""), index_text.find("\"model.embed_tokens.weight\""));
  EXPECT_LT(index_text.find("\"model.layers.1.mlp.up_proj.weight\""), index_text.find("\"model.norm.weight\""));

  const HfFolder folder = HfFolder::open(dir);
  EXPECT_EQ(folder.dir(), dir);
  EXPECT_EQ(folder.config(), kConfig);
  std::vector<std::string> names;
  for (const auto& [name, t] : tensors) names.push_back(name);
  std::sort(names.begin(), names.end());
  EXPECT_EQ(folder.tensor_names(), names);
  for (const auto& [name, t] : tensors) {
    expect_bit_identical(t, read_tensor(folder.file_of(name), name), name);
    EXPECT_EQ(folder.info(name).nbytes, static_cast<uint64_t>(t.nbytes()));
  }
  EXPECT_EQ(folder.file_of("lm_head.weight").path(), (fs::path(dir) / "model-00004-of-00004.safetensors").string());
  EXPECT_TRUE(folder.tokenizer_files().empty());
  try {
    folder.info("model.layers.9.mlp.up_proj.weight");
    FAIL() << "expected an error";
  } catch (const common::Error& e) {
    EXPECT_NE(std::string(e.what()).find(dir), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("\"model.layers.9.mlp.up_proj.weight\" is not in the model"),
              std::string::npos) << e.what();
  }
}

TEST(HfFolderTest, SingleFileFolderWithConfigAndTokenizer) {
  TempDir tmp("hf_folder_test");
  const fs::path tok = tmp.file("tokenizer_src");
  fs::create_directories(tok);
  write_text(tok / "tokenizer.json", R"({"model": {"type": "BPE"}})");
  write_text(tok / "tokenizer_config.json", R"({"bos_token": "<s>"})");
  write_text(tok / "special_tokens_map.json", "{}");
  write_text(tok / "README.md", "not a tokenizer file");
  const std::string dir = tmp.file("model");
  const auto tensors = model_tensors();
  write_hf_folder(dir, tensors, kConfig, tok.string());

  EXPECT_TRUE(fs::exists(fs::path(dir) / "model.safetensors"));
  EXPECT_FALSE(fs::exists(fs::path(dir) / "model.safetensors.index.json"));
  EXPECT_FALSE(fs::exists(fs::path(dir) / "README.md"));
  const std::string config_text = read_text(fs::path(dir) / "config.json");
  EXPECT_EQ(config_text, kConfig.dump(2) + "\n");
  EXPECT_NE(config_text.find("\n  \"hidden_size\": 16"), std::string::npos) << config_text;

  const HfFolder folder = HfFolder::open(dir);
  EXPECT_EQ(folder.tokenizer_files(),
            (std::vector<std::string>{"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"}));
  for (const char* name : {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"}) {
    EXPECT_EQ(read_text(fs::path(dir) / name), read_text(tok / name)) << name;
  }
  for (const auto& [name, t] : tensors) expect_bit_identical(t, read_tensor(folder.file_of(name), name), name);

  // Writing again into a folder that holds weights would mix old and new shards.
  try {
    write_hf_folder(dir, tensors, kConfig, "", 1000);
    FAIL() << "expected an error";
  } catch (const common::Error& e) {
    EXPECT_NE(std::string(e.what()).find("already holds weights (model.safetensors)"), std::string::npos) << e.what();
  }
}

// Folders built by hand, each wrong in one way.
class HfFolderErrorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = tmp_.file("model");
    fs::create_directories(dir_);
    write_text(dir_ / "config.json", kConfig.dump());
    a_ = randn({4}, at::kFloat);
    b_ = randn({2, 3}, at::kBFloat16);
  }
  void write_shard(const std::string& name, const std::vector<std::pair<std::string, at::Tensor>>& tensors) {
    write_safetensors((dir_ / name).string(), tensors);
  }
  void write_index(const json& weight_map) {
    write_text(dir_ / "model.safetensors.index.json",
               json{{"metadata", {{"total_size", 28}}}, {"weight_map", weight_map}}.dump(2));
  }
  void expect_open_error(const std::vector<std::string>& wanted) {
    try {
      HfFolder::open(dir_.string());
      FAIL() << "expected an error";
    } catch (const common::Error& e) {
      for (const std::string& w : wanted) {
        EXPECT_NE(std::string(e.what()).find(w), std::string::npos) << "want: " << w << "\n got: " << e.what();
      }
    }
  }
  std::string index_path() const { return (dir_ / "model.safetensors.index.json").string(); }

  TempDir tmp_{"hf_folder_test"};
  fs::path dir_;
  at::Tensor a_, b_;
};

TEST_F(HfFolderErrorTest, IndexNamesAMissingShard) {
  write_shard("s1.safetensors", {{"a", a_}});
  write_index({{"a", "s1.safetensors"}, {"b", "s2.safetensors"}});
  expect_open_error({index_path(), "tensor \"b\"", "\"s2.safetensors\"", "does not exist"});
}

TEST_F(HfFolderErrorTest, TensorListedInIndexButAbsentFromShard) {
  write_shard("s1.safetensors", {{"a", a_}});
  write_index({{"a", "s1.safetensors"}, {"b", "s1.safetensors"}});
  expect_open_error({index_path(), "tensor \"b\"", "\"s1.safetensors\"", "does not contain it"});
}

TEST_F(HfFolderErrorTest, TensorInShardButNotInIndex) {
  write_shard("s1.safetensors", {{"a", a_}, {"b", b_}});
  write_index({{"a", "s1.safetensors"}});
  expect_open_error({index_path(), "tensor \"b\"", "s1.safetensors", "not in the index"});
}

TEST_F(HfFolderErrorTest, SameTensorInTwoFiles) {
  write_shard("s1.safetensors", {{"a", a_}});
  write_shard("s2.safetensors", {{"a", a_}, {"b", b_}});
  write_index({{"a", "s1.safetensors"}, {"b", "s2.safetensors"}});
  expect_open_error({index_path(), "tensor \"a\" is in two files", "\"s1.safetensors\"", "\"s2.safetensors\""});
}

TEST_F(HfFolderErrorTest, TensorListedTwiceInTheIndex) {
  write_shard("s1.safetensors", {{"a", a_}});
  write_text(dir_ / "model.safetensors.index.json",
             R"({"weight_map": {"a": "s1.safetensors", "a": "s1.safetensors"}})");
  expect_open_error({index_path(), "\"a\" appears twice"});
}

TEST_F(HfFolderErrorTest, ShardNameWithPathTraversal) {
  write_shard("s1.safetensors", {{"a", a_}});
  for (const char* evil : {"../s1.safetensors", "/etc/passwd", "sub/s1.safetensors", ".."}) {
    SCOPED_TRACE(evil);
    write_index({{"a", evil}});
    expect_open_error({index_path(), "tensor \"a\"", "not a plain file name"});
  }
}

TEST_F(HfFolderErrorTest, BrokenConfigJson) {
  write_shard("model.safetensors", {{"a", a_}});
  write_text(dir_ / "config.json", "{\"hidden_size\": 16,\n \"num_layers\": }");
  expect_open_error({(dir_ / "config.json").string(), "not valid JSON at byte 35"});
}

TEST_F(HfFolderErrorTest, MissingConfigJson) {
  write_shard("model.safetensors", {{"a", a_}});
  fs::remove(dir_ / "config.json");
  expect_open_error({(dir_ / "config.json").string(), "is missing"});
}

TEST_F(HfFolderErrorTest, NoWeights) {
  expect_open_error({dir_.string(), "has neither model.safetensors nor model.safetensors.index.json"});
}

TEST_F(HfFolderErrorTest, CorruptShardNamesTheShard) {
  write_text(dir_ / "s1.safetensors", std::string("\x02\x00\x00\x00\x00\x00\x00\x00{}", 10) + "xx");
  write_index({{"a", "s1.safetensors"}});
  expect_open_error({(dir_ / "s1.safetensors").string(), "trailing bytes"});
}

}  // namespace
}  // namespace shardtune::checkpoint
