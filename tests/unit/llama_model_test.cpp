// The Llama model against independent facts: published parameter counts of real configs, RoPE
// scaling computed by a scalar formula, finite-difference gradients, and properties that any
// correct Llama has (packing equals separate documents, causality, GQA equals MHA with repeated
// heads, tied heads, loss by hand).
#include <ATen/TensorOperators.h>
#include <ATen/ops/allclose.h>
#include <ATen/ops/equal.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/randint.h>
#include <ATen/ops/tensor.h>
#include <ATen/ops/matmul.h>
#include <ATen/ops/repeat_interleave.h>
#include <ATen/ops/softmax.h>
#include <ATen/ops/zeros.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <tuple>

#include <nlohmann/json.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>

#include "common/error.h"
#include "runtime/model/generate.h"
#include "runtime/model/init.h"
#include "runtime/model/kv_cache.h"
#include "runtime/model/llama.h"
#include "runtime/model/loss.h"

namespace shardtune::model {
namespace {

const std::string kConfigs = std::string(ST_FIXTURES) + "/hf_configs/";

LlamaForCausalLM make_model(const LlamaConfig& c, at::ScalarType dtype = at::kDouble, uint64_t seed = 7) {
  LlamaForCausalLM m(c, at::TensorOptions().dtype(dtype));
  init_weights(m, seed);
  return m;
}

at::Tensor tokens(int64_t b, int64_t t, int64_t vocab, uint64_t seed) {
  at::Tensor ids = at::empty({b, t}, at::kLong);
  for (int64_t i = 0; i < b * t; ++i) ids.data_ptr<int64_t>()[i] = static_cast<int64_t>((seed * 7919 + i * 104729) % vocab);
  return ids;
}

TEST(LlamaConfig, RealConfigsGiveThePublishedParameterCounts) {
  EXPECT_EQ(LlamaConfig::from_file(kConfigs + "llama-2-7b.json").num_parameters(), 6738415616);
  EXPECT_EQ(LlamaConfig::from_file(kConfigs + "llama-3-8b.json").num_parameters(), 8030261248);
  EXPECT_EQ(LlamaConfig::from_file(kConfigs + "llama-3.1-70b.json").num_parameters(), 70553706496);
  EXPECT_EQ(LlamaConfig::from_file(kConfigs + "llama-3.2-1b.json").num_parameters(), 1235814400);
  const LlamaConfig c = LlamaConfig::from_file(kConfigs + "llama-3.1-70b.json");
  EXPECT_EQ(c.rope_scaling.type, "llama3");
  EXPECT_EQ(c.eos_token_ids, (std::vector<int64_t>{128001, 128008, 128009}));
  EXPECT_EQ(c.num_key_value_heads, 8);
  EXPECT_TRUE(LlamaConfig::from_file(kConfigs + "llama-3.2-1b.json").tie_word_embeddings);
}

// transformers 5 writes the rotary parameters, rope_theta included, into one rope_parameters
// object, and the dtype as "dtype": the same model as transformers 4's spelling.
TEST(LlamaConfig, Transformers5SpellingReadsAsTheLegacyOne) {
  using nlohmann::json;
  json legacy = json::parse(std::ifstream(kConfigs + "llama-3.1-70b.json"));
  json v5 = legacy;
  v5.erase("rope_theta");
  v5.erase("rope_scaling");
  v5.erase("torch_dtype");
  v5["dtype"] = "bfloat16";
  v5["rope_parameters"] = legacy["rope_scaling"];
  v5["rope_parameters"]["rope_theta"] = legacy["rope_theta"];
  const LlamaConfig a = LlamaConfig::from_json(legacy, "legacy");
  const LlamaConfig b = LlamaConfig::from_json(v5, "v5");
  EXPECT_EQ(b.rope_theta, 500000.0);
  EXPECT_EQ(b.rope_theta, a.rope_theta);
  EXPECT_EQ(b.rope_scaling.type, "llama3");
  EXPECT_EQ(b.rope_scaling.factor, a.rope_scaling.factor);
  EXPECT_EQ(b.rope_scaling.low_freq_factor, a.rope_scaling.low_freq_factor);
  EXPECT_EQ(b.rope_scaling.high_freq_factor, a.rope_scaling.high_freq_factor);
  EXPECT_EQ(b.rope_scaling.original_max_position_embeddings, a.rope_scaling.original_max_position_embeddings);
  EXPECT_EQ(b.torch_dtype, "bfloat16");
  EXPECT_EQ(b.to_json(), a.to_json());

  // Without scaling: {"rope_type": "default", "rope_theta": ...}.
  const LlamaConfig d = LlamaConfig::from_json(json::parse(R"({"rope_parameters": {"rope_type": "default", "rope_theta": 123.0}})"), "d");
  EXPECT_EQ(d.rope_theta, 123.0);
  EXPECT_TRUE(d.rope_scaling.type.empty());

  auto error_of = [](const std::string& text) {
    try {
      LlamaConfig::from_json(json::parse(text), "m/config.json");
    } catch (const common::Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(error_of(R"({"rope_parameters": {"full_attention": {"rope_type": "default", "rope_theta": 1.0}}})")
                .find("m/config.json: rope_parameters holds one set per layer type (full_attention)"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"rope_parameters": {"rope_type": "yarn", "factor": 4.0}})").find("rope type \"yarn\" is not supported"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"rope_parameters": {"rope_theta": "big"}})").find("m/config.json rope_parameters: 'rope_theta' must be a number"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"rope_parameters": 5})").find("m/config.json: rope_parameters must be an object or null"),
            std::string::npos);
}

TEST(LlamaConfig, MetaConstructionOfA70BAllocatesNothing) {
  LlamaForCausalLM m(LlamaConfig::from_file(kConfigs + "llama-3.1-70b.json"), at::TensorOptions().device(at::kMeta));
  int64_t numel = 0;
  for (const NamedParam& p : m.named_parameters()) {
    EXPECT_TRUE(p.tensor->is_meta()) << p.name;
    numel += p.tensor->numel();
  }
  EXPECT_EQ(numel, 70553706496);
}

TEST(LlamaConfig, ErrorsNameTheFileAndKey) {
  auto error_of = [](const std::string& text) {
    try {
      LlamaConfig::from_json(nlohmann::json::parse(text), "m/config.json");
    } catch (const common::Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(error_of(R"({"model_type": "mistral"})").find("m/config.json: model_type is \"mistral\""), std::string::npos);
  EXPECT_NE(error_of(R"({"hidden_size": "big"})").find("m/config.json: 'hidden_size' must be an integer"), std::string::npos);
  EXPECT_NE(error_of(R"({"num_attention_heads": 32, "num_key_value_heads": 5})").find("not a multiple of num_key_value_heads 5"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"rope_scaling": {"rope_type": "yarn", "factor": 4.0}})").find("rope type \"yarn\" is not supported"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"num_hidden_layers": 0})").find("'num_hidden_layers' must be positive"), std::string::npos);
}

// transformers refuses a llama3 or linear scaling without its keys (rope_config_validation); these
// used to take shardtune's defaults silently (original_max_position_embeddings 8192, factor 1).
TEST(LlamaConfig, RopeScalingWithoutItsKeysIsRefusedAsTransformersRefusesIt) {
  auto error_of = [](const std::string& text) {
    try {
      LlamaConfig::from_json(nlohmann::json::parse(text), "m/config.json");
    } catch (const common::Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const std::string full = R"("factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0)";
  EXPECT_NE(error_of(R"({"rope_scaling": {"rope_type": "llama3", )" + full + "}}")
                .find("m/config.json rope_scaling: rope type \"llama3\" needs factor, low_freq_factor, "
                      "high_freq_factor, original_max_position_embeddings; missing: original_max_position_embeddings"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"rope_scaling": {"type": "llama3", "original_max_position_embeddings": 8192}})")
                .find("missing: factor, low_freq_factor, high_freq_factor"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"rope_scaling": {"rope_type": "linear"}})").find("rope type \"linear\" needs factor; missing: factor"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"rope_parameters": {"rope_type": "llama3", "rope_theta": 5e5, "factor": null, )"
                     R"("low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}})")
                .find("missing: factor"),
            std::string::npos);
  const LlamaConfig ok = LlamaConfig::from_json(
      nlohmann::json::parse(R"({"rope_scaling": {"type": "llama3", )" + full +
                            R"(, "original_max_position_embeddings": 4096}, "rope_parameters": {"rope_theta": 1e6}})"),
      "ok");
  EXPECT_EQ(ok.rope_scaling.original_max_position_embeddings, 4096);
  EXPECT_EQ(ok.rope_theta, 1e6);
}

TEST(LlamaConfig, FilesTooDeepOrOutOfRangeAreRefusedByName) {
  const auto dir = std::filesystem::temp_directory_path() / ("shardtune_config_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  for (const auto& [name, text, want] :
       {std::tuple<std::string, std::string, std::string>{"deep.json",
                                                          "{\"x\": " + std::string(100000, '[') + std::string(100000, ']') + "}",
                                                          "nested more than 64 deep"},
        {"huge.json", R"({"rope_theta": 1e400})", "not valid JSON"}}) {
    const std::string path = (dir / name).string();
    std::ofstream(path) << text;
    try {
      LlamaConfig::from_file(path);
      ADD_FAILURE() << name << " accepted";
    } catch (const common::Error& e) {
      EXPECT_NE(std::string(e.what()).find(path + ": " + want), std::string::npos) << e.what();
    }
  }
  std::filesystem::remove_all(dir);
}

TEST(LlamaConfig, JsonRoundTrip) {
  for (const char* name : {"llama-2-7b.json", "llama-3-8b.json", "llama-3.1-70b.json", "llama-3.2-1b.json"}) {
    const LlamaConfig a = LlamaConfig::from_file(kConfigs + name);
    const LlamaConfig b = LlamaConfig::from_json(a.to_json(), name);
    EXPECT_EQ(a.to_json(), b.to_json()) << name;
    EXPECT_EQ(a.num_parameters(), b.num_parameters()) << name;
  }
}

TEST(Rope, Llama3ScalingMatchesTheScalarFormula) {
  const LlamaConfig c = LlamaConfig::from_file(kConfigs + "llama-3.1-70b.json");
  const at::Tensor inv = rope_inv_freq(c);
  ASSERT_EQ(inv.numel(), c.head_dim / 2);
  const double lo = 8192 / 1.0, hi = 8192 / 4.0;
  for (int64_t i = 0; i < inv.numel(); ++i) {
    const double f = 1.0 / std::pow(500000.0, 2.0 * i / 128.0);
    const double wavelen = 2 * M_PI / f;
    double want = f;
    if (wavelen > lo) {
      want = f / 8.0;
    } else if (wavelen >= hi) {
      const double smooth = (8192 / wavelen - 1.0) / (4.0 - 1.0);
      want = (1 - smooth) * f / 8.0 + smooth * f;
    }
    EXPECT_NEAR(inv[i].item<float>(), want, 2e-6 * want) << "frequency " << i;
  }
}

TEST(Llama, GradientsMatchFiniteDifferences) {
  LlamaConfig c = LlamaConfig::tiny();
  c.num_hidden_layers = 1;
  LlamaForCausalLM m = make_model(c);
  for (NamedParam& p : m.named_parameters()) p.tensor->requires_grad_(true);
  const at::Tensor ids = tokens(2, 9, c.vocab_size, 1);
  at::Tensor labels = ids.clone();
  labels.select(1, 3).fill_(kIgnoreIndex);
  auto loss_value = [&] { return causal_lm_loss(m.forward(ids), labels); };
  loss_value().backward();
  for (NamedParam& p : m.named_parameters()) {
    at::Tensor& w = *p.tensor;
    const at::Tensor grad = w.grad().clone();
    for (int64_t k : {int64_t(0), w.numel() / 2, w.numel() - 1}) {
      at::Tensor flat = w.detach().view({-1});
      const double orig = flat[k].item<double>(), h = 1e-6;
      flat[k] = orig + h;
      const double up = loss_value().item<double>();
      flat[k] = orig - h;
      const double down = loss_value().item<double>();
      flat[k] = orig;
      const double numeric = (up - down) / (2 * h);
      EXPECT_NEAR(grad.view({-1})[k].item<double>(), numeric, 1e-6 + 1e-5 * std::abs(numeric)) << p.name << "[" << k << "]";
    }
  }
}

TEST(Llama, PackedDocumentsEqualSeparateDocuments) {
  const LlamaConfig c = LlamaConfig::tiny();
  LlamaForCausalLM m = make_model(c);
  const at::Tensor a = tokens(1, 5, c.vocab_size, 2), b = tokens(1, 7, c.vocab_size, 3);
  const at::Tensor packed = at::cat({a, b}, 1);
  const at::Tensor positions = at::cat({default_position_ids(a), default_position_ids(b)}, 1);
  const at::Tensor logits = m.forward(packed, positions);
  EXPECT_TRUE(at::allclose(logits.narrow(1, 0, 5), m.forward(a), 1e-10, 1e-12));
  EXPECT_TRUE(at::allclose(logits.narrow(1, 5, 7), m.forward(b), 1e-10, 1e-12));
  // Without the restart the second document would see the first: the mask matters.
  EXPECT_FALSE(at::allclose(m.forward(packed).narrow(1, 5, 7), m.forward(b), 1e-6, 1e-6));
}

TEST(Llama, PackedRowsSplitIntoTheirDocuments) {
  const at::Tensor positions =
      at::tensor(std::vector<int64_t>{0, 1, 2, 0, 1, 0, /* row 2: one document */ 4, 5, 6, 7, 8, 9}, at::kLong).view({2, 6});
  const AttentionMask mask = packed_document_mask(positions);
  ASSERT_EQ(mask.rows.size(), 2u);
  std::vector<std::pair<int64_t, int64_t>> first, second;
  for (const auto& s : mask.rows[0]) first.emplace_back(s.begin, s.end);
  for (const auto& s : mask.rows[1]) second.emplace_back(s.begin, s.end);
  EXPECT_EQ(first, (std::vector<std::pair<int64_t, int64_t>>{{0, 3}, {3, 5}, {5, 6}}));
  EXPECT_EQ(second, (std::vector<std::pair<int64_t, int64_t>>{{0, 6}}));
  // Rows that are each one document need no segments: plain causal attention over the batch.
  EXPECT_TRUE(packed_document_mask(default_position_ids(at::empty({2, 6}, at::kLong))).rows.empty());
}

TEST(Llama, PackedRowsEqualTheDenseMaskedAttention) {
  // The per-document attention against masked attention over the whole row, written out here.
  const LlamaConfig c = LlamaConfig::tiny();
  LlamaForCausalLM m = make_model(c);
  const at::Tensor positions = at::tensor(std::vector<int64_t>{0, 1, 2, 3, 0, 1, 2, 0, 1, 0, 1, 2, 3, 4, 5, 6}, at::kLong)
                                   .view({2, 8});
  const at::Tensor ids = tokens(2, 8, c.vocab_size, 6);
  const AttentionMask segments = packed_document_mask(positions);
  const RopeTables rope = m.rope(positions, at::kDouble);
  const at::Tensor x = m.embed(ids);
  const Attention& attn = m.layer(0).self_attn;
  // Dense: allowed[b][i][j] = same document and j <= i.
  const int64_t b = 2, t = 8, h = attn.num_heads, d = attn.head_dim;
  at::Tensor q = apply_rope(attn.q_proj.forward(x).view({b, t, h, d}).transpose(1, 2), rope);
  at::Tensor k = apply_rope(attn.k_proj.forward(x).view({b, t, attn.num_kv_heads, d}).transpose(1, 2), rope);
  at::Tensor v = attn.v_proj.forward(x).view({b, t, attn.num_kv_heads, d}).transpose(1, 2);
  const int64_t groups = h / attn.num_kv_heads;
  k = k.repeat_interleave(groups, 1);
  v = v.repeat_interleave(groups, 1);
  at::Tensor allowed = at::zeros({b, 1, t, t}, at::kBool);
  for (int64_t r = 0; r < b; ++r)
    for (const auto& s : segments.rows[static_cast<size_t>(r)])
      for (int64_t i = s.begin; i < s.end; ++i)
        for (int64_t j = s.begin; j <= i; ++j) allowed[r][0][i][j] = true;
  at::Tensor scores = at::matmul(q, k.transpose(-2, -1)) / std::sqrt(static_cast<double>(d));
  scores = scores.masked_fill(allowed.logical_not(), -std::numeric_limits<double>::infinity());
  const at::Tensor dense = attn.o_proj.forward(at::matmul(at::softmax(scores, -1), v).transpose(1, 2).reshape({b, t, h * d}));
  EXPECT_TRUE(at::allclose(attn.forward(x, rope, segments), dense, 1e-10, 1e-12));
}

TEST(Llama, LaterTokensDoNotChangeEarlierLogits) {
  const LlamaConfig c = LlamaConfig::tiny();
  LlamaForCausalLM m = make_model(c);
  at::Tensor ids = tokens(1, 8, c.vocab_size, 4);
  const at::Tensor before = m.forward(ids);
  ids[0][6] = (ids[0][6].item<int64_t>() + 1) % c.vocab_size;
  const at::Tensor after = m.forward(ids);
  EXPECT_TRUE(at::allclose(before.narrow(1, 0, 6), after.narrow(1, 0, 6), 0, 0));
  EXPECT_FALSE(at::allclose(before.narrow(1, 6, 2), after.narrow(1, 6, 2), 1e-6, 1e-6));
}

TEST(Llama, GroupedQueryAttentionEqualsMultiHeadWithRepeatedHeads) {
  LlamaConfig gqa = LlamaConfig::tiny();  // 4 query heads, 2 key/value heads
  LlamaConfig mha = gqa;
  mha.num_key_value_heads = mha.num_attention_heads;
  LlamaForCausalLM a = make_model(gqa), b = make_model(mha);
  auto pa = a.named_parameters(), pb = b.named_parameters();
  ASSERT_EQ(pa.size(), pb.size());
  const int64_t d = gqa.head_dim, groups = gqa.num_attention_heads / gqa.num_key_value_heads;
  for (size_t i = 0; i < pa.size(); ++i) {
    const std::string& name = pa[i].name;
    if (name.find("k_proj") != std::string::npos || name.find("v_proj") != std::string::npos) {
      // kv head h serves query heads h*groups .. h*groups+groups-1.
      at::Tensor w = pa[i].tensor->view({gqa.num_key_value_heads, 1, d, -1}).expand({-1, groups, -1, -1});
      pb[i].tensor->copy_(w.reshape(pb[i].tensor->sizes()));
    } else {
      pb[i].tensor->copy_(*pa[i].tensor);
    }
  }
  const at::Tensor ids = tokens(2, 6, gqa.vocab_size, 5);
  EXPECT_TRUE(at::allclose(a.forward(ids), b.forward(ids), 1e-10, 1e-12));
}

TEST(Llama, TiedHeadUsesTheEmbedding) {
  LlamaConfig c = LlamaConfig::tiny();
  c.tie_word_embeddings = true;
  LlamaForCausalLM m = make_model(c);
  std::vector<std::string> names;
  for (const NamedParam& p : m.named_parameters()) names.push_back(p.name);
  EXPECT_EQ(std::count(names.begin(), names.end(), "lm_head.weight"), 0);
  EXPECT_EQ(names.front(), "model.embed_tokens.weight");
  EXPECT_EQ(static_cast<int64_t>(names.size()), 2 + 9 * c.num_hidden_layers);
  int64_t numel = 0;
  for (const NamedParam& p : m.named_parameters()) numel += p.tensor->numel();
  EXPECT_EQ(numel, c.num_parameters());
  // Changing the embedding changes the head's logits for every position.
  const at::Tensor ids = tokens(1, 4, c.vocab_size, 6);
  const at::Tensor before = m.forward(ids);
  m.named_parameters().front().tensor->select(0, 17).add_(1.0);
  EXPECT_FALSE(at::allclose(before.select(2, 17), m.forward(ids).select(2, 17), 1e-6, 1e-6));
}

TEST(Llama, LossIsTheMeanOverCountedTokens) {
  const at::Tensor logits = at::randint(-3, 3, {2, 4, 5}, at::kDouble) * 0.5;
  const at::Tensor labels = at::tensor(std::vector<int64_t>{9, 1, -100, 4, 9, -100, -100, 0}, at::kLong).view({2, 4});
  double total = 0;
  int counted = 0;
  for (int b = 0; b < 2; ++b)
    for (int t = 0; t + 1 < 4; ++t) {
      const int64_t y = labels[b][t + 1].item<int64_t>();
      if (y == kIgnoreIndex) continue;
      double z = 0;
      for (int v = 0; v < 5; ++v) z += std::exp(logits[b][t][v].item<double>());
      total += std::log(z) - logits[b][t][y].item<double>();
      ++counted;
    }
  EXPECT_EQ(counted, 3);  // the first label of each row is never predicted
  EXPECT_NEAR(causal_lm_loss(logits, labels).item<double>(), total / counted, 1e-12);
}

TEST(Llama, InitIsTransformersStyleAndDependsOnlyOnSeedAndName) {
  LlamaConfig c = LlamaConfig::tiny();
  c.hidden_size = 256;
  c.intermediate_size = 512;
  c.head_dim = 64;
  LlamaForCausalLM m = make_model(c, at::kFloat, 11);
  for (const NamedParam& p : m.named_parameters()) {
    if (p.name.find("norm") != std::string::npos) {
      EXPECT_EQ(p.tensor->min().item<float>(), 1.0f) << p.name;
      EXPECT_EQ(p.tensor->max().item<float>(), 1.0f) << p.name;
    } else {
      EXPECT_NEAR(p.tensor->mean().item<float>(), 0.0, 0.002) << p.name;
      EXPECT_NEAR(p.tensor->std().item<float>(), 0.02, 0.001) << p.name;
    }
  }
  LlamaConfig deeper = c;
  deeper.num_hidden_layers = 4;
  LlamaForCausalLM d = make_model(deeper, at::kFloat, 11);
  EXPECT_TRUE(at::equal(m.layer(1).self_attn.q_proj.weight, d.layer(1).self_attn.q_proj.weight));
  LlamaForCausalLM other = make_model(c, at::kFloat, 12);
  EXPECT_FALSE(at::equal(m.layer(0).mlp.up_proj.weight, other.layer(0).mlp.up_proj.weight));
}

TEST(Llama, MaterializeGivesMetaParametersStorage) {
  LlamaForCausalLM m(LlamaConfig::tiny(), at::TensorOptions().device(at::kMeta));
  materialize(m, at::TensorOptions().dtype(at::kFloat));
  init_weights(m, 3);
  const at::Tensor ids = tokens(1, 4, 256, 8);
  EXPECT_EQ(m.forward(ids).sizes(), (std::vector<int64_t>{1, 4, 256}));
}

}  // namespace
}  // namespace shardtune::model

namespace shardtune::model {
namespace {

// The KV cache's logits, fed a prompt at once and then a token or a few at a time, equal the
// full forward of the whole sequence within 1e-5 of the largest logit (float32), on a model with
// grouped-query attention, Llama 3 RoPE scaling and biases.
TEST(KvCache, LogitsEqualTheWholeSequencesForwardWithin1e5) {
  LlamaConfig c = LlamaConfig::tiny();
  c.attention_bias = c.mlp_bias = true;
  const LlamaForCausalLM m = make_model(c, at::kFloat, 11);
  const at::Tensor ids = tokens(2, 21, c.vocab_size, 5);
  const at::Tensor whole = m.forward(ids);
  KvCache cache(c, 2, 24, m.options());
  std::vector<at::Tensor> parts;
  int64_t at = 0;
  for (const int64_t n : {7, 1, 1, 3, 1, 8}) {
    parts.push_back(cache.forward(m, ids.narrow(1, at, n)));
    at += n;
  }
  ASSERT_EQ(cache.length(), 21);
  const at::Tensor cached = at::cat(parts, 1);
  const double scale = whole.abs().max().item<double>();
  EXPECT_LT((cached - whole).abs().max().item<double>() / scale, 1e-5);
  EXPECT_THROW(cache.forward(m, ids.narrow(1, 0, 4)), common::Error);  // 25 > 24
}

// Sampling against its formula: the same seed draws the same tokens; top_k = 1, or a tiny top_p,
// is greedy; draws stay among the top k, or the top-p set; and the frequencies of 40000 draws at a
// temperature are softmax(logits / T) within 5 standard deviations.
TEST(Sampling, DrawsFollowTheWarpedSoftmaxAndTheSeed) {
  const std::vector<double> l = {1.0, 3.0, 2.5, -1.0, 0.0, 3.0, 2.0, -4.0};
  const at::Tensor logits = at::tensor(l, at::kDouble).to(at::kFloat);
  auto draws = [&](SamplingOptions o, int n) {
    TokenSampler s(o);
    std::vector<int32_t> out;
    for (int i = 0; i < n; ++i) out.push_back(s.next(logits));
    return out;
  };
  EXPECT_EQ(TokenSampler({}).next(logits), 1);  // greedy: the first of the two largest
  EXPECT_EQ(draws({1.0, 0, 1.0, 9}, 50), draws({1.0, 0, 1.0, 9}, 50));
  EXPECT_NE(draws({1.0, 0, 1.0, 9}, 50), draws({1.0, 0, 1.0, 10}, 50));
  for (int32_t t : draws({2.0, 1, 1.0, 3}, 50)) EXPECT_EQ(t, 1);
  for (int32_t t : draws({2.0, 0, 1e-6, 3}, 50)) EXPECT_EQ(t, 1);
  // A temperature so small that l / T overflows: the largest logits (tokens 1 and 5, equal) alone.
  for (int32_t t : draws({1e-310, 0, 1.0, 8}, 200)) EXPECT_TRUE(t == 1 || t == 5) << t;
  for (int32_t t : draws({5.0, 3, 1.0, 4}, 500)) EXPECT_TRUE(t == 1 || t == 5 || t == 2) << t;
  // top_p = 0.5 at T = 1: tokens 1 and 5 hold 0.315 of the mass each, so the set is {1, 5}.
  for (int32_t t : draws({1.0, 0, 0.5, 6}, 500)) EXPECT_TRUE(t == 1 || t == 5) << t;
  const double temperature = 1.7;
  const int n = 40000;
  std::vector<int> count(l.size(), 0);
  for (int32_t t : draws({temperature, 0, 1.0, 7}, n)) ++count[static_cast<size_t>(t)];
  double z = 0;
  for (double x : l) z += std::exp(x / temperature);
  for (size_t i = 0; i < l.size(); ++i) {
    const double p = std::exp(l[i] / temperature) / z;
    EXPECT_LT(std::abs(count[i] - n * p), 5 * std::sqrt(n * p * (1 - p)) + 1) << "token " << i;
  }
}

}  // namespace
}  // namespace shardtune::model
