// The LoRA and QLoRA folders the plain-PyTorch reference writes (torch_reference_make, into
// SHARDTUNE_TORCH_REFERENCE), and the error measure the tests hold shardtune to against them.
#pragma once

#include <ATen/core/Tensor.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <vector>

namespace shardtune::testing_support {

// max |a - b| / max |b|, as the single-process reference test measures it.
inline double relative_error(const at::Tensor& a, const at::Tensor& b) {
  const double scale = b.abs().max().item<double>();
  return (a.to(at::kCPU, at::kDouble) - b.to(at::kDouble)).abs().max().item<double>() / (scale > 0 ? scale : 1.0);
}

// The adapter folders (base/, adapter/, reference.safetensors), sorted: those on an NF4 base
// (with qlora.json) or the others. Empty when SHARDTUNE_TORCH_REFERENCE is not set.
inline std::vector<std::filesystem::path> adapter_reference_folders(bool qlora) {
  namespace fs = std::filesystem;
  const char* root = std::getenv("SHARDTUNE_TORCH_REFERENCE");
  std::vector<fs::path> out;
  if (root == nullptr) return out;
  for (const auto& e : fs::directory_iterator(root))
    if (fs::exists(e.path() / "adapter") && fs::exists(e.path() / "reference.safetensors") &&
        fs::exists(e.path() / "qlora.json") == qlora)
      out.push_back(e.path());
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace shardtune::testing_support
