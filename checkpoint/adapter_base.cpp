// Comparing base models.
#include "checkpoint/adapter_base.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <vector>

namespace shardtune::checkpoint {

std::optional<std::string> base_mismatch(const AdapterRecord& saved, const AdapterRecord& current) {
  std::vector<std::string> differ;
  const auto compare = [&](const char* what, const std::string& a, const std::string& b) {
    if (a != b) differ.push_back(fmt::format("{} {} here, {} in the checkpoint", what, b.substr(0, 12), a.substr(0, 12)));
  };
  compare("config.json SHA-256", saved.base_config_sha256, current.base_config_sha256);
  compare("tensor index SHA-256", saved.base_tensors_sha256, current.base_tensors_sha256);
  if (!saved.base_weights_sha256.empty() && !current.base_weights_sha256.empty()) {
    compare("weights SHA-256 (every byte)", saved.base_weights_sha256, current.base_weights_sha256);
  } else {
    compare("weights SHA-256 (first 64 bytes of each tensor)", saved.base_weights_sample_sha256,
            current.base_weights_sample_sha256);
  }
  if (differ.empty()) return std::nullopt;
  return fmt::format("its adapters were trained on the base model {}, but this base model ({}) differs: {}",
                     saved.base_path, current.base_path, fmt::join(differ, "; "));
}

}  // namespace shardtune::checkpoint
