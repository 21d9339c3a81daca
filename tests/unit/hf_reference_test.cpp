// shardtune's Llama against Hugging Face transformers itself (folders made by
// tests/reference/make_llama_fixtures.py) and against an independent plain-PyTorch Llama
// (tests/reference/llama_torch_reference.py): load each folder with shardtune and match the
// logits, loss and gradients the reference computed (fp32, relative error below 1e-5); with LoRA
// adapters too.
#include <ATen/TensorOperators.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <vector>

#include "checkpoint/hf/hf_model_io.h"
#include "checkpoint/hf/peft_adapter.h"
#include "checkpoint/hf/safetensors_torch.h"
#include "runtime/model/generate.h"
#include "runtime/model/lora.h"
#include "runtime/model/loss.h"

namespace shardtune::checkpoint {
namespace {

namespace fs = std::filesystem;

const fs::path kFixtures = fs::path(ST_FIXTURES) / "hf";

// max |a - b| / max |b|: the error relative to the reference's scale.
double relative_error(const at::Tensor& a, const at::Tensor& b) {
  const double scale = b.abs().max().item<double>();
  return (a.to(at::kDouble) - b.to(at::kDouble)).abs().max().item<double>() / (scale > 0 ? scale : 1.0);
}

// The folders under `root` that hold a reference.safetensors, sorted: model folders (with their
// config.json) or, with `lora`, LoRA folders (base/, adapter/).
std::vector<fs::path> reference_folders(const fs::path& root, bool lora = false) {
  std::vector<fs::path> out;
  if (fs::exists(root))
    for (const auto& e : fs::directory_iterator(root))
      if (fs::exists(e.path() / "reference.safetensors") && fs::exists(e.path() / (lora ? "adapter" : "config.json")) &&
          !fs::exists(e.path() / "qlora.json"))  // LoRA on an NF4 base: qlora_fsdp_test's
        out.push_back(e.path());
  std::sort(out.begin(), out.end());
  return out;
}

// Loads the folder's model with shardtune, runs the reference's inputs (and position ids, for
// packed rows) forward and backward in fp32, and matches logits, loss and every gradient the
// reference recorded.
void expect_matches_reference(const fs::path& dir) {
  SCOPED_TRACE(dir.string());
  const HfFolder folder = HfFolder::open(dir.string());
  model::LlamaForCausalLM m(read_hf_config(folder), at::TensorOptions().dtype(at::kFloat));
  load_hf_weights(m, folder);
  for (model::NamedParam& p : m.named_parameters()) p.tensor->requires_grad_(true);

  const SafetensorsFile ref = SafetensorsFile::open((dir / "reference.safetensors").string());
  const at::Tensor positions = ref.find("position_ids") ? read_tensor(ref, "position_ids") : at::Tensor();
  const at::Tensor logits = m.forward(read_tensor(ref, "input_ids"), positions);
  EXPECT_LT(relative_error(logits, read_tensor(ref, "logits")), 1e-5);
  const at::Tensor loss = model::causal_lm_loss(logits, read_tensor(ref, "labels"));
  EXPECT_LT(relative_error(loss, read_tensor(ref, "loss")), 1e-5);
  loss.backward();
  int grads = 0;
  for (model::NamedParam& p : m.named_parameters()) {
    if (ref.find("grad." + p.name) == nullptr) continue;
    ++grads;
    EXPECT_LT(relative_error(p.tensor->grad(), read_tensor(ref, "grad." + p.name)), 1e-5) << p.name;
  }
  EXPECT_GE(grads, 6);
}

// Folders written by transformers itself (tests/reference/make_llama_fixtures.py), committed.
TEST(HfReference, LogitsLossAndGradientsMatchTransformers) {
  const auto folders = reference_folders(kFixtures);
  if (folders.empty())
    GTEST_SKIP() << "no reference fixtures under " << kFixtures
                 << ": run tests/reference/make_llama_fixtures.py where torch and transformers are installed";
  for (const fs::path& dir : folders) expect_matches_reference(dir);
}

// Folders written by the plain-PyTorch reference (tests/reference/llama_torch_reference.py),
// which CTest runs first into the directory named by SHARDTUNE_TORCH_REFERENCE.
TEST(TorchReference, LogitsLossAndGradientsMatchThePlainTorchLlama) {
  const char* root = std::getenv("SHARDTUNE_TORCH_REFERENCE");
  if (root == nullptr) GTEST_SKIP() << "SHARDTUNE_TORCH_REFERENCE is not set (ctest -R torch_reference sets it)";
  const auto folders = reference_folders(root);
  ASSERT_GE(folders.size(), 5u) << "reference folders under " << root;
  for (const fs::path& dir : folders) expect_matches_reference(dir);
}

// Greedy decoding with the KV cache (model::generate) gives, token for token, the reference's
// greedy decode, which recomputes the whole sequence in float64 at each step. The reference's
// choices are all decisive (the runner-up at least 1e-4 of the largest logit behind), so float32
// rounding cannot flip one.
TEST(TorchReference, GreedyDecodingWithTheKvCacheEqualsThePlainTorchLlama) {
  const char* root = std::getenv("SHARDTUNE_TORCH_REFERENCE");
  if (root == nullptr) GTEST_SKIP() << "SHARDTUNE_TORCH_REFERENCE is not set (ctest -R torch_reference sets it)";
  int decoded = 0;
  for (const fs::path& dir : reference_folders(root)) {
    const SafetensorsFile ref = SafetensorsFile::open((dir / "reference.safetensors").string());
    if (ref.find("greedy_ids") == nullptr) continue;  // packed rows: no decode
    SCOPED_TRACE(dir.string());
    const HfFolder folder = HfFolder::open(dir.string());
    model::LlamaForCausalLM m(read_hf_config(folder), at::TensorOptions().dtype(at::kFloat));
    load_hf_weights(m, folder);
    ASSERT_GT(read_tensor(ref, "greedy_margin").min().item<double>(), 1e-4);
    const at::Tensor prompt = read_tensor(ref, "greedy_prompt"), want = read_tensor(ref, "greedy_ids");
    model::GenerateOptions options;
    options.max_new_tokens = want.numel();
    const model::Generation got =
        model::generate(m, std::vector<int32_t>(prompt.data_ptr<int64_t>(), prompt.data_ptr<int64_t>() + prompt.numel()),
                        options);
    EXPECT_EQ(got.tokens, std::vector<int32_t>(want.data_ptr<int64_t>(), want.data_ptr<int64_t>() + want.numel()));
    EXPECT_FALSE(got.stopped);
    ++decoded;
  }
  EXPECT_GE(decoded, 4) << "reference folders with a greedy decode under " << root;
}

// LoRA: the plain-PyTorch reference's base model with its PEFT adapter folder, loaded by
// shardtune (add_lora, then the adapter folder): logits, loss and every adapter's gradient match
// the reference, and the frozen base gets no gradient.
TEST(TorchReference, LoraLogitsLossAndAdapterGradientsMatchThePlainTorchReference) {
  const char* root = std::getenv("SHARDTUNE_TORCH_REFERENCE");
  if (root == nullptr) GTEST_SKIP() << "SHARDTUNE_TORCH_REFERENCE is not set (ctest -R torch_reference sets it)";
  const auto folders = reference_folders(root, /*lora=*/true);
  ASSERT_GE(folders.size(), 2u) << "LoRA reference folders under " << root;
  for (const fs::path& dir : folders) {
    SCOPED_TRACE(dir.string());
    const HfFolder folder = HfFolder::open((dir / "base").string());
    model::LlamaForCausalLM m(read_hf_config(folder), at::TensorOptions().dtype(at::kFloat));
    load_hf_weights(m, folder);
    const PeftAdapterConfig adapter = read_peft_config((dir / "adapter").string());
    model::add_lora(m, adapter.lora, 7);
    load_peft_adapter(m, adapter.lora, (dir / "adapter").string());
    for (model::NamedParam& p : m.named_parameters()) p.tensor->requires_grad_(model::is_adapter_parameter(p.name));

    const SafetensorsFile ref = SafetensorsFile::open((dir / "reference.safetensors").string());
    const at::Tensor logits = m.forward(read_tensor(ref, "input_ids"));
    EXPECT_LT(relative_error(logits, read_tensor(ref, "logits")), 1e-5);
    const at::Tensor loss = model::causal_lm_loss(logits, read_tensor(ref, "labels"));
    EXPECT_LT(relative_error(loss, read_tensor(ref, "loss")), 1e-5);
    loss.backward();
    int adapters = 0;
    for (model::NamedParam& p : m.named_parameters()) {
      if (!model::is_adapter_parameter(p.name)) {
        EXPECT_FALSE(p.tensor->grad().defined()) << p.name;
        continue;
      }
      ++adapters;
      ASSERT_NE(ref.find("grad." + p.name), nullptr) << p.name;
      EXPECT_LT(relative_error(p.tensor->grad(), read_tensor(ref, "grad." + p.name)), 1e-5) << p.name;
    }
    const auto grads = std::count_if(ref.tensors().begin(), ref.tensors().end(),
                                     [](const TensorInfo& t) { return t.name.rfind("grad.", 0) == 0; });
    EXPECT_EQ(adapters, grads) << "every adapter the reference has, and no other";
    EXPECT_GE(adapters, 10);
  }
}

}  // namespace
}  // namespace shardtune::checkpoint
