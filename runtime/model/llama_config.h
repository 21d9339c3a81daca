// A Llama model's shape, as Hugging Face's config.json describes it (Llama 2, 3, 3.1, 3.2).
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace shardtune::model {

struct RopeScaling {
  std::string type;  // "" (none), "linear", "llama3"
  double factor = 1.0;
  double low_freq_factor = 1.0;                     // llama3
  double high_freq_factor = 4.0;                    // llama3
  int64_t original_max_position_embeddings = 8192;  // llama3
};

struct LlamaConfig {
  int64_t vocab_size = 32000;
  int64_t hidden_size = 4096;
  int64_t intermediate_size = 11008;
  int64_t num_hidden_layers = 32;
  int64_t num_attention_heads = 32;
  int64_t num_key_value_heads = 32;
  int64_t head_dim = 128;
  int64_t max_position_embeddings = 4096;
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  double initializer_range = 0.02;
  RopeScaling rope_scaling;
  bool tie_word_embeddings = false;
  bool attention_bias = false;
  bool mlp_bias = false;
  std::string torch_dtype = "float32";
  int64_t bos_token_id = 1;
  std::vector<int64_t> eos_token_ids = {2};
  // The folder stores its weights in bitsandbytes' 4 bits (quantization_config: quant_method
  // "bitsandbytes", load_in_4bit): a property of the folder, not of the shape, and not written back.
  bool bnb_4bit = false;

  // Reads a parsed config.json; `source` names it in errors ("folder/config.json"). Unknown keys
  // are ignored as transformers ignores them; a wrong value is an error naming the key.
  static LlamaConfig from_json(const nlohmann::json& j, const std::string& source);
  static LlamaConfig from_file(const std::string& path);
  nlohmann::json to_json() const;

  // The 2-block debug model of the "tiny" preset (GQA, llama3 RoPE, untied head).
  static LlamaConfig tiny();

  // What makes `other` a model of another shape (vocabulary, hidden and intermediate sizes, blocks,
  // heads, key/value heads, head size, a tied head), in words naming each and both values; "" when
  // their parameters have the same names and shapes.
  std::string shape_difference(const LlamaConfig& other) const;

  // Parameters of the model, counted from the shapes.
  int64_t num_parameters() const;
};

// config.json's quantization_config says bitsandbytes' 4 bits (LlamaConfig::bnb_4bit).
bool is_bnb_4bit_config(const nlohmann::json& config);

// Tensors some Hugging Face Llama folders store that are not weights, which transformers does not
// load either: the RoPE frequencies older conversions saved per block
// (model.layers.N.self_attn.rotary_emb.inv_freq), computed from config.json instead.
bool is_ignored_checkpoint_tensor(std::string_view name);

}  // namespace shardtune::model
