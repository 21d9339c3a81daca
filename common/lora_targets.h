// The Linear modules of a Llama model that LoRA may target, by their Hugging Face names: known to
// the job file's validation (on the login node) and to the model.
#pragma once

#include <array>
#include <string_view>

namespace shardtune::common {

// The seven projections of every decoder block: what PEFT's "all-linear" means for a causal LM.
inline constexpr std::array<std::string_view, 7> kLoraBlockModules = {"q_proj", "k_proj", "v_proj", "o_proj",
                                                                      "gate_proj", "up_proj", "down_proj"};
inline constexpr std::string_view kLoraHeadModule = "lm_head";
inline constexpr std::string_view kLoraAllLinear = "all-linear";

constexpr bool is_lora_target_name(std::string_view name) {
  for (std::string_view m : kLoraBlockModules)
    if (m == name) return true;
  return name == kLoraHeadModule || name == kLoraAllLinear;
}

}  // namespace shardtune::common
