// shardtune's Llama against Hugging Face transformers itself: for each folder made by
// tools/reference/make_llama_fixtures.py, load the model with shardtune and match the logits,
// loss and gradients that transformers computed (fp32, relative error below 1e-5).
#include <ATen/TensorOperators.h>
#include <gtest/gtest.h>

#include <filesystem>

#include "checkpoint/hf_model_io.h"
#include "checkpoint/safetensors_torch.h"
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

std::vector<fs::path> fixture_folders() {
  std::vector<fs::path> out;
  if (fs::exists(kFixtures))
    for (const auto& e : fs::directory_iterator(kFixtures))
      if (fs::exists(e.path() / "reference.safetensors")) out.push_back(e.path());
  std::sort(out.begin(), out.end());
  return out;
}

TEST(HfReference, LogitsLossAndGradientsMatchTransformers) {
  const auto folders = fixture_folders();
  if (folders.empty())
    GTEST_SKIP() << "no reference fixtures under " << kFixtures
                 << ": run tools/reference/make_llama_fixtures.py where torch and transformers are installed";
  for (const fs::path& dir : folders) {
    SCOPED_TRACE(dir.string());
    const HfFolder folder = HfFolder::open(dir.string());
    model::LlamaForCausalLM m(read_hf_config(folder), at::TensorOptions().dtype(at::kFloat));
    load_hf_weights(m, folder);
    for (model::NamedParam& p : m.named_parameters()) p.tensor->requires_grad_(true);

    const SafetensorsFile ref = SafetensorsFile::open((dir / "reference.safetensors").string());
    const at::Tensor logits = m.forward(read_tensor(ref, "input_ids"));
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
}

}  // namespace
}  // namespace shardtune::checkpoint
