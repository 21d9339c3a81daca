// config.json ↔ LlamaConfig, with errors that name the file and key.
#include "runtime/model/llama_config.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <fstream>
#include <vector>
#include <iterator>
#include <nlohmann/json.hpp>

#include "common/error.h"
#include "common/strict_json.h"

namespace shardtune::model {
namespace {

using common::ErrorKind;
using nlohmann::json;

class Reader {
 public:
  Reader(const json& j, const std::string& source) : j_(j), source_(source) {}

  template <class T>
  void get(const char* key, T& out) {
    auto it = j_.find(key);
    if (it == j_.end() || it->is_null()) return;
    try {
      if constexpr (std::is_same_v<T, double>) {
        ST_CHECK(it->is_number(), ErrorKind::kConfig, "{}: '{}' must be a number, got {}", source_, key, it->dump());
      } else if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
        ST_CHECK(it->is_number_integer(), ErrorKind::kConfig, "{}: '{}' must be an integer, got {}", source_, key,
                 it->dump());
      } else if constexpr (std::is_same_v<T, bool>) {
        ST_CHECK(it->is_boolean(), ErrorKind::kConfig, "{}: '{}' must be true or false, got {}", source_, key,
                 it->dump());
      } else {
        ST_CHECK(it->is_string(), ErrorKind::kConfig, "{}: '{}' must be a string, got {}", source_, key, it->dump());
      }
      out = it->get<T>();
    } catch (const json::exception& e) {
      common::raise(ErrorKind::kConfig, fmt::format("{}: '{}': {}", source_, key, e.what()));
    }
  }

  void positive(const char* key, int64_t v) {
    ST_CHECK(v > 0, ErrorKind::kConfig, "{}: '{}' must be positive, got {}", source_, key, v);
  }

 private:
  const json& j_;
  const std::string& source_;
};

// The rotary embedding's scaling: `rope_scaling` (transformers 4) or `rope_parameters`
// (transformers 5, which also holds rope_theta there); `where` names the object in errors.
void read_rope(const json& obj, const std::string& source, const std::string& where, LlamaConfig& c) {
  ST_CHECK(obj.is_object(), ErrorKind::kConfig, "{}: {} must be an object or null", source, where);
  const std::string named = source + " " + where;  // outlives the reader, which keeps a reference
  Reader r(obj, named);
  r.get("rope_theta", c.rope_theta);
  RopeScaling& s = c.rope_scaling;
  r.get("type", s.type);
  r.get("rope_type", s.type);  // the newer spelling wins
  if (s.type == "default") s.type.clear();
  ST_CHECK(s.type.empty() || s.type == "linear" || s.type == "llama3", ErrorKind::kConfig,
           "{}: rope type \"{}\" is not supported; Llama uses \"llama3\" (3.1, 3.2), \"linear\" or none", source,
           s.type);
  // The keys transformers requires of each type (rope_config_validation raises without them),
  // checked where this object names its type: a rope_parameters holding only rope_theta keeps the
  // scaling rope_scaling gave.
  if (obj.contains("type") || obj.contains("rope_type")) {
    std::vector<std::string> required;
    if (s.type == "linear") required = {"factor"};
    if (s.type == "llama3")
      required = {"factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"};
    std::vector<std::string> missing;
    for (const std::string& key : required)
      if (!obj.contains(key) || obj.at(key).is_null()) missing.push_back(key);
    ST_CHECK(missing.empty(), ErrorKind::kConfig,
             "{}: rope type \"{}\" needs {}; missing: {} (transformers refuses this config too)", named, s.type,
             fmt::join(required, ", "), fmt::join(missing, ", "));
  }
  r.get("factor", s.factor);
  r.get("low_freq_factor", s.low_freq_factor);
  r.get("high_freq_factor", s.high_freq_factor);
  r.get("original_max_position_embeddings", s.original_max_position_embeddings);
  ST_CHECK(s.factor > 0 && s.low_freq_factor > 0 && s.high_freq_factor > s.low_freq_factor, ErrorKind::kConfig,
           "{}: needs factor > 0 and high_freq_factor > low_freq_factor > 0", named);
}

}  // namespace

LlamaConfig LlamaConfig::from_json(const json& j, const std::string& source) {
  ST_CHECK(j.is_object(), ErrorKind::kConfig, "{}: expected a JSON object", source);
  if (auto it = j.find("model_type"); it != j.end())
    ST_CHECK(it->is_string() && *it == "llama", ErrorKind::kConfig,
             "{}: model_type is {}, but shardtune trains Llama models (model_type \"llama\")", source, it->dump());
  if (auto it = j.find("hidden_act"); it != j.end())
    ST_CHECK(it->is_string() && *it == "silu", ErrorKind::kConfig,
             "{}: hidden_act is {}; Llama uses \"silu\"", source, it->dump());
  LlamaConfig c;
  Reader r(j, source);
  r.get("vocab_size", c.vocab_size);
  r.get("hidden_size", c.hidden_size);
  r.get("intermediate_size", c.intermediate_size);
  r.get("num_hidden_layers", c.num_hidden_layers);
  r.get("num_attention_heads", c.num_attention_heads);
  c.num_key_value_heads = c.num_attention_heads;  // Llama 2 7B/13B configs omit it
  r.get("num_key_value_heads", c.num_key_value_heads);
  for (auto [key, v] : {std::pair{"vocab_size", c.vocab_size}, {"hidden_size", c.hidden_size},
                        {"intermediate_size", c.intermediate_size}, {"num_hidden_layers", c.num_hidden_layers},
                        {"num_attention_heads", c.num_attention_heads}, {"num_key_value_heads", c.num_key_value_heads}})
    r.positive(key, v);
  c.head_dim = c.hidden_size / c.num_attention_heads;
  r.get("head_dim", c.head_dim);
  r.positive("head_dim", c.head_dim);
  ST_CHECK(j.contains("head_dim") || c.hidden_size % c.num_attention_heads == 0, ErrorKind::kConfig,
           "{}: hidden_size {} is not divisible by num_attention_heads {}", source, c.hidden_size,
           c.num_attention_heads);
  ST_CHECK(c.head_dim % 2 == 0, ErrorKind::kConfig, "{}: head_dim {} must be even for rotary embeddings", source,
           c.head_dim);
  ST_CHECK(c.num_attention_heads % c.num_key_value_heads == 0, ErrorKind::kConfig,
           "{}: num_attention_heads {} is not a multiple of num_key_value_heads {}", source, c.num_attention_heads,
           c.num_key_value_heads);
  r.get("max_position_embeddings", c.max_position_embeddings);
  r.get("rms_norm_eps", c.rms_norm_eps);
  r.get("rope_theta", c.rope_theta);
  r.get("initializer_range", c.initializer_range);
  r.get("tie_word_embeddings", c.tie_word_embeddings);
  r.get("attention_bias", c.attention_bias);
  r.get("mlp_bias", c.mlp_bias);
  r.get("dtype", c.torch_dtype);  // transformers 5
  r.get("torch_dtype", c.torch_dtype);
  r.get("bos_token_id", c.bos_token_id);
  if (auto it = j.find("eos_token_id"); it != j.end() && !it->is_null()) {
    // Llama 3.1 lists several end tokens.
    c.eos_token_ids.clear();
    if (it->is_array()) {
      for (const json& e : *it) {
        ST_CHECK(e.is_number_integer(), ErrorKind::kConfig, "{}: eos_token_id entries must be integers", source);
        c.eos_token_ids.push_back(e.get<int64_t>());
      }
    } else {
      ST_CHECK(it->is_number_integer(), ErrorKind::kConfig, "{}: eos_token_id must be an integer or a list", source);
      c.eos_token_ids.push_back(it->get<int64_t>());
    }
  }
  if (auto it = j.find("rope_scaling"); it != j.end() && !it->is_null()) read_rope(*it, source, "rope_scaling", c);
  if (auto it = j.find("rope_parameters"); it != j.end() && !it->is_null()) {
    // One set for every layer; per-layer-type sets (keyed by attention kind) are not Llama's.
    ST_CHECK(!it->is_object() || it->empty() || !it->begin()->is_object(), ErrorKind::kConfig,
             "{}: rope_parameters holds one set per layer type ({}); Llama uses one set", source,
             it->begin().key());
    read_rope(*it, source, "rope_parameters", c);
  }
  c.bnb_4bit = is_bnb_4bit_config(j);
  return c;
}

bool is_bnb_4bit_config(const json& config) {
  if (!config.is_object()) return false;
  auto it = config.find("quantization_config");
  return it != config.end() && it->is_object() && it->value("quant_method", "") == "bitsandbytes" &&
         it->value("load_in_4bit", false);
}

LlamaConfig LlamaConfig::from_file(const std::string& path) {
  std::ifstream in(path);
  ST_CHECK(in.good(), ErrorKind::kIo, "cannot open {}: {}", path, std::strerror(errno));
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  json j;
  try {
    common::StrictJson parsed = common::parse_json_strict(text.data(), text.data() + text.size());
    ST_CHECK(!parsed.too_deep, ErrorKind::kConfig, "{}: nested more than {} deep: not a model config", path,
             common::kMaxJsonDepth);
    j = std::move(parsed.value);
  } catch (const json::parse_error& e) {
    common::raise(ErrorKind::kConfig, fmt::format("{}: not valid JSON at byte {}: {}", path, e.byte, e.what()));
  } catch (const json::exception& e) {  // a number out of range, like 1e400
    common::raise(ErrorKind::kConfig, fmt::format("{}: not valid JSON: {}", path, e.what()));
  }
  return from_json(j, path);
}

json LlamaConfig::to_json() const {
  json j = {
      {"architectures", {"LlamaForCausalLM"}},
      {"model_type", "llama"},
      {"hidden_act", "silu"},
      {"vocab_size", vocab_size},
      {"hidden_size", hidden_size},
      {"intermediate_size", intermediate_size},
      {"num_hidden_layers", num_hidden_layers},
      {"num_attention_heads", num_attention_heads},
      {"num_key_value_heads", num_key_value_heads},
      {"head_dim", head_dim},
      {"max_position_embeddings", max_position_embeddings},
      {"rms_norm_eps", rms_norm_eps},
      {"rope_theta", rope_theta},
      {"initializer_range", initializer_range},
      {"tie_word_embeddings", tie_word_embeddings},
      {"attention_bias", attention_bias},
      {"attention_dropout", 0.0},
      {"mlp_bias", mlp_bias},
      {"torch_dtype", torch_dtype},
      {"bos_token_id", bos_token_id},
  };
  j["eos_token_id"] = eos_token_ids.size() == 1 ? json(eos_token_ids[0]) : json(eos_token_ids);
  if (rope_scaling.type.empty()) {
    j["rope_scaling"] = nullptr;
  } else {
    j["rope_scaling"] = {{"rope_type", rope_scaling.type}, {"factor", rope_scaling.factor}};
    if (rope_scaling.type == "llama3") {
      j["rope_scaling"]["low_freq_factor"] = rope_scaling.low_freq_factor;
      j["rope_scaling"]["high_freq_factor"] = rope_scaling.high_freq_factor;
      j["rope_scaling"]["original_max_position_embeddings"] = rope_scaling.original_max_position_embeddings;
    }
  }
  return j;
}

LlamaConfig LlamaConfig::tiny() {
  LlamaConfig c;
  c.vocab_size = 256;
  c.hidden_size = 64;
  c.intermediate_size = 160;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.head_dim = 16;
  c.max_position_embeddings = 256;
  c.rms_norm_eps = 1e-5;
  c.rope_theta = 500000.0;
  c.rope_scaling = {"llama3", 8.0, 1.0, 4.0, 64};
  c.bos_token_id = 1;
  c.eos_token_ids = {2};
  return c;
}

int64_t LlamaConfig::num_parameters() const {
  const int64_t q = num_attention_heads * head_dim, kv = num_key_value_heads * head_dim;
  int64_t attn = hidden_size * q + 2 * hidden_size * kv + q * hidden_size;
  if (attention_bias) attn += q + 2 * kv + hidden_size;
  int64_t mlp = 3 * hidden_size * intermediate_size;
  if (mlp_bias) mlp += 2 * intermediate_size + hidden_size;
  const int64_t block = attn + mlp + 2 * hidden_size;
  const int64_t embed = vocab_size * hidden_size;
  return embed + num_hidden_layers * block + hidden_size + (tie_word_embeddings ? 0 : embed);
}

bool is_ignored_checkpoint_tensor(std::string_view name) {
  constexpr std::string_view kSuffix = "rotary_emb.inv_freq";
  return name.size() >= kSuffix.size() && name.substr(name.size() - kSuffix.size()) == kSuffix &&
         (name.size() == kSuffix.size() || name[name.size() - kSuffix.size() - 1] == '.');
}

std::string LlamaConfig::shape_difference(const LlamaConfig& other) const {
  const std::pair<const char*, std::pair<int64_t, int64_t>> items[] = {
      {"vocab_size", {vocab_size, other.vocab_size}},
      {"hidden_size", {hidden_size, other.hidden_size}},
      {"intermediate_size", {intermediate_size, other.intermediate_size}},
      {"num_hidden_layers", {num_hidden_layers, other.num_hidden_layers}},
      {"num_attention_heads", {num_attention_heads, other.num_attention_heads}},
      {"num_key_value_heads", {num_key_value_heads, other.num_key_value_heads}},
      {"head_dim", {head_dim, other.head_dim}},
      {"tie_word_embeddings", {tie_word_embeddings ? 1 : 0, other.tie_word_embeddings ? 1 : 0}},
      {"attention_bias", {attention_bias ? 1 : 0, other.attention_bias ? 1 : 0}},
      {"mlp_bias", {mlp_bias ? 1 : 0, other.mlp_bias ? 1 : 0}},
  };
  std::string out;
  for (const auto& [name, values] : items)
    if (values.first != values.second)
      out += fmt::format("{}{} {} there, {} here", out.empty() ? "" : "; ", name, values.first, values.second);
  return out;
}

}  // namespace shardtune::model
