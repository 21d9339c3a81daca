#include "tools/ckpt_gguf.h"

#include <ATen/ATen.h>
#include <fmt/format.h>

#include <cmath>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>

#include "checkpoint/checkpoint_reader.h"
#include "checkpoint/gguf_writer.h"
#include "checkpoint/hf/bnb_nf4.h"
#include "checkpoint/hf/hf_folder.h"
#include "checkpoint/hf/hf_model_io.h"
#include "checkpoint/hf/hf_tensor_source.h"
#include "common/error.h"
#include "common/file_io.h"
#include "common/job/job_loader.h"
#include "runtime/data/chat.h"
#include "runtime/fsdp/shard_loader.h"
#include "runtime/model/llama.h"
#include "runtime/model/rope.h"
#include "tools/tool_progress.h"

namespace shardtune::tools {
namespace {

using checkpoint::GgmlType;
using common::ErrorKind;
using nlohmann::json;
namespace fs = std::filesystem;

// Llama 3's pre-tokenizer regex: the one llama.cpp knows as "llama-bpe".
constexpr const char* kLlama3Regex =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|"
    "\\s+(?!\\S)|\\s+";

// What is exported: the model's config and a reader of its tensors (fp32, whole).
struct Source {
  json config_json;
  model::LlamaConfig config;
  std::string tokenizer;  // tokenizer.json; empty when none is known
  std::string name;
  std::function<at::Tensor(const std::string&)> read;
  // The chat format a checkpoint's job trained in ([data] format = "chat"); none otherwise.
  std::optional<data::ChatStyle> trained_chat;
};

Source open_checkpoint(const std::string& dir) {
  auto reader = std::make_shared<checkpoint::CheckpointReader>(dir);
  const checkpoint::Manifest& m = reader->manifest();
  ST_CHECK(!m.adapter, ErrorKind::kConfig,
           "{} holds LoRA adapters, not a whole model: merge-lora {} BASE OUT writes the base with them merged in, "
           "which export-gguf then takes",
           dir, dir);
  ST_CHECK(!m.model_config.is_null(), ErrorKind::kConfig, "{} records no model config.json", dir);
  Source s;
  s.config_json = m.model_config;
  s.config = model::LlamaConfig::from_json(m.model_config, dir + "/manifest.json");
  const job::Job job = job::parse_job(m.job_toml, dir + "/manifest.json (its job)").job;
  const std::string model_tokenizer = job.model.path.empty() ? "" : job.model.path + "/tokenizer.json";
  s.tokenizer = !job.data.tokenizer.empty() ? job.data.tokenizer : model_tokenizer;
  s.name = job.job.name;
  if (job.data.format == job::DataFormat::kPreference) {  // conversational pairs, or text ones with no template
    try {
      s.trained_chat = data::choose_chat_style(job.data.chat_format, s.tokenizer).style;
    } catch (const common::Error&) {
    }
  } else if (job.data.format == job::DataFormat::kChat) {
    try {
      s.trained_chat = data::choose_chat_style(job.data.chat_format, s.tokenizer).style;
    } catch (const common::Error& e) {
      common::raise(ErrorKind::kConfig,
                    fmt::format("{} was trained on chat data, and its chat format cannot be told now ({}), so no chat "
                                "template can be chosen for the GGUF file",
                                dir, e.what()));
    }
  }
  s.read = [reader](const std::string& name) {
    ST_CHECK(reader->has("param", name), ErrorKind::kIo, "{} holds no {}", reader->dir(), name);
    return reader->read_tensor("param", name);
  };
  return s;
}

Source open_folder(const std::string& dir) {
  auto source = std::make_shared<checkpoint::HfTensorSource>(dir);
  Source s;
  s.config_json = source->folder().config();
  s.config = model::LlamaConfig::from_json(s.config_json, dir + "/config.json");
  ST_CHECK(!checkpoint::is_bnb_4bit(source->folder()), ErrorKind::kConfig,
           "{} stores its projections in 4 bits (a bitsandbytes folder), which GGUF's f32, f16 and bf16 types do not "
           "hold: export its original (unquantised) folder instead",
           dir);
  // Every tensor against config.json before anything is written: a missing, extra or misshapen
  // one, or one that is not a float, is named (as training and import-hf name them).
  model::LlamaForCausalLM skeleton(s.config, at::TensorOptions().device(at::kMeta));
  const std::vector<std::string> ignored = checkpoint::check_hf_weights(skeleton, source->folder());
  if (!ignored.empty()) fmt::print(stderr, "{}: {}\n", dir, fsdp::ignored_tensors_note(ignored));
  s.tokenizer = fs::exists(dir + "/tokenizer.json") ? dir + "/tokenizer.json" : "";
  fs::path named = fs::path(dir).lexically_normal();
  if (!named.has_filename()) named = named.parent_path();  // "models/x/" names x too
  s.name = named.filename().string();
  s.read = [source](const std::string& name) {
    const checkpoint::TensorInfo& info = source->folder().info(name);
    at::Tensor t = at::empty(std::vector<int64_t>(info.shape.begin(), info.shape.end()), at::kFloat);
    source->read(name, 0, t.numel(), at::kFloat, t.data_ptr<float>());
    return t;
  };
  return s;
}

// The tokenizer as GGUF stores it.
struct Vocab {
  std::string model, pre;  // "gpt2" + "llama-bpe" (byte-level BPE) or "llama" (SentencePiece-style)
  std::vector<std::string> tokens, merges;
  std::vector<int32_t> types;  // 1 normal, 3 control, 4 user-defined, 5 unused, 6 byte
  std::vector<float> scores;   // "llama": a merge's result scores minus its rank, so earlier merges win
  std::optional<int32_t> bos, eos, pad, unk;
  std::optional<bool> add_bos, add_eos;
  std::string chat_template;
};

std::string token_text(const json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v.at("content").is_string()) return v.at("content").get<std::string>();
  return "";
}

json read_json(const std::string& path, const char* what) {
  try {
    return json::parse(common::read_file(path, ErrorKind::kConfig, what));
  } catch (const json::exception& e) {
    common::raise(ErrorKind::kConfig, fmt::format("{}: not valid JSON: {}", path, e.what()));
  }
}

// "gpt2" with Llama 3's pre-tokenizer, or "llama" for BPE with byte fallback; anything else is refused.
void choose_tokenizer_model(const json& t, const std::string& path, Vocab& v) {
  const json& m = t.at("model");
  if (m.value("byte_fallback", false)) {
    v.model = "llama";
    v.pre = "default";
    return;
  }
  const json& pre = t.contains("pre_tokenizer") ? t.at("pre_tokenizer") : json();
  const bool llama3 = pre.is_object() && pre.value("type", "") == "Sequence" && pre.at("pretokenizers").size() == 2 &&
                      pre.at("pretokenizers")[0].value("type", "") == "Split" &&
                      pre.at("pretokenizers")[0].at("pattern").value("Regex", "") == kLlama3Regex &&
                      pre.at("pretokenizers")[1].value("type", "") == "ByteLevel";
  ST_CHECK(llama3, ErrorKind::kConfig,
           "{}: a byte-level BPE tokenizer whose pre-tokenizer is not Llama 3's; llama.cpp splits text only by the "
           "pre-tokenizers it knows by name, so export-gguf writes Llama 3's (\"llama-bpe\") or SentencePiece-style ones",
           path);
  v.model = "gpt2";
  v.pre = "llama-bpe";
}

Vocab read_vocab(const std::string& path, int64_t vocab_size) {
  const json t = read_json(path, "the tokenizer");
  ST_CHECK(t.is_object() && t.contains("model") && t.at("model").value("type", "") == "BPE", ErrorKind::kConfig,
           "{}: export-gguf embeds BPE tokenizers (Llama 3's byte-level, Llama 2's SentencePiece-style)", path);
  Vocab v;
  choose_tokenizer_model(t, path, v);
  std::map<int64_t, std::pair<std::string, int32_t>> by_id;  // id -> (text, type)
  for (const auto& [text, id] : t.at("model").at("vocab").items()) {
    const bool byte = v.model == "llama" && text.size() == 6 && text.rfind("<0x", 0) == 0 && text.back() == '>';
    by_id[id.get<int64_t>()] = {text, byte ? 6 : 1};
  }
  if (t.contains("added_tokens"))
    for (const json& a : t.at("added_tokens")) by_id[a.at("id").get<int64_t>()] = {a.at("content"), a.value("special", false) ? 3 : 4};
  ST_CHECK(!by_id.empty() && by_id.rbegin()->first < vocab_size, ErrorKind::kConfig,
           "{} has token ids up to {} but the model's vocabulary has {} rows: a tokenizer of another model?", path,
           by_id.empty() ? -1 : by_id.rbegin()->first, vocab_size);
  for (int64_t id = 0; id < vocab_size; ++id) {
    auto it = by_id.find(id);
    v.tokens.push_back(it != by_id.end() ? it->second.first : fmt::format("[PAD{}]", id));
    v.types.push_back(it != by_id.end() ? it->second.second : 5);
  }
  std::map<std::string, int64_t> id_of;
  for (const auto& [id, entry] : by_id) id_of[entry.first] = id;
  if (t.at("model").contains("merges")) {
    const json& merges = t.at("model").at("merges");
    if (v.model == "llama") v.scores.assign(static_cast<size_t>(vocab_size), 0.0f);
    for (size_t rank = 0; rank < merges.size(); ++rank) {
      const json& m = merges[rank];
      const std::string a = m.is_string() ? m.get<std::string>().substr(0, m.get<std::string>().find(' ')) : m[0].get<std::string>();
      const std::string b = m.is_string() ? m.get<std::string>().substr(m.get<std::string>().find(' ') + 1) : m[1].get<std::string>();
      if (v.model == "gpt2") v.merges.push_back(a + " " + b);
      else if (auto it = id_of.find(a + b); it != id_of.end() && v.scores[static_cast<size_t>(it->second)] == 0.0f)
        v.scores[static_cast<size_t>(it->second)] = -static_cast<float>(rank + 1);
    }
  }
  // Special tokens and the chat template: tokenizer_config.json beside it (or chat_template.jinja).
  const fs::path dir = fs::path(path).parent_path();
  if (fs::exists(dir / "tokenizer_config.json")) {
    const json c = read_json((dir / "tokenizer_config.json").string(), "the tokenizer config");
    auto id_for = [&](const char* key) -> std::optional<int32_t> {
      if (!c.contains(key)) return std::nullopt;
      auto it = id_of.find(token_text(c.at(key)));
      return it == id_of.end() ? std::nullopt : std::optional<int32_t>(static_cast<int32_t>(it->second));
    };
    v.bos = id_for("bos_token");
    v.eos = id_for("eos_token");
    v.pad = id_for("pad_token");
    v.unk = id_for("unk_token");
    if (c.contains("add_bos_token") && c.at("add_bos_token").is_boolean()) v.add_bos = c.at("add_bos_token").get<bool>();
    if (c.contains("add_eos_token") && c.at("add_eos_token").is_boolean()) v.add_eos = c.at("add_eos_token").get<bool>();
    if (c.contains("chat_template") && c.at("chat_template").is_string()) v.chat_template = c.at("chat_template");
    if (c.contains("chat_template") && c.at("chat_template").is_array())
      for (const json& named : c.at("chat_template"))
        if (named.value("name", "") == "default") v.chat_template = named.value("template", "");
  }
  if (v.chat_template.empty() && fs::exists(dir / "chat_template.jinja"))
    v.chat_template = common::read_file((dir / "chat_template.jinja").string(), ErrorKind::kConfig, "the chat template");
  return v;
}

// llama.cpp's name of a Hugging Face Llama tensor.
std::string gguf_name(const std::string& hf) {
  static const std::vector<std::pair<std::string, std::string>> parts = {
      {"input_layernorm.weight", "attn_norm.weight"}, {"post_attention_layernorm.weight", "ffn_norm.weight"},
      {"self_attn.q_proj.", "attn_q."},              {"self_attn.k_proj.", "attn_k."},
      {"self_attn.v_proj.", "attn_v."},              {"self_attn.o_proj.", "attn_output."},
      {"mlp.gate_proj.", "ffn_gate."},               {"mlp.up_proj.", "ffn_up."},
      {"mlp.down_proj.", "ffn_down."}};
  if (hf == "model.embed_tokens.weight") return "token_embd.weight";
  if (hf == "model.norm.weight") return "output_norm.weight";
  if (hf == "lm_head.weight") return "output.weight";
  const std::string prefix = "model.layers.";
  ST_CHECK(hf.rfind(prefix, 0) == 0, ErrorKind::kInternal, "no GGUF name for {}", hf);
  const size_t dot = hf.find('.', prefix.size());
  const std::string block = hf.substr(prefix.size(), dot - prefix.size()), rest = hf.substr(dot + 1);
  for (const auto& [from, to] : parts)
    if (rest.rfind(from, 0) == 0) return "blk." + block + "." + to + rest.substr(from.size());
  common::raise(ErrorKind::kInternal, fmt::format("no GGUF name for {}", hf));
}

// llama.cpp rotates adjacent pairs of a head's dimensions where transformers rotates its two halves:
// row 2j + r of a head comes from row r * (D / 2) + j (convert_hf_to_gguf's permute), for the weight
// and the bias of q_proj (per query head) and k_proj (per key/value head).
at::Tensor interleave_heads(const at::Tensor& t, int64_t heads) {
  const int64_t rows = t.size(0), half = rows / heads / 2;
  std::vector<int64_t> split{heads, 2, half};
  for (int64_t d = 1; d < t.dim(); ++d) split.push_back(t.size(d));
  return t.reshape(split).transpose(1, 2).contiguous().reshape(t.sizes());
}

// Llama 3's scaled frequencies as llama.cpp takes them: the factor each inverse frequency is divided by.
std::vector<float> llama3_rope_factors(const model::LlamaConfig& c) {
  const model::RopeScaling& s = c.rope_scaling;
  const double low_wavelen = static_cast<double>(s.original_max_position_embeddings) / s.low_freq_factor;
  const double high_wavelen = static_cast<double>(s.original_max_position_embeddings) / s.high_freq_factor;
  std::vector<float> out;
  for (int64_t i = 0; i < c.head_dim; i += 2) {
    const double freq = 1.0 / std::pow(c.rope_theta, static_cast<double>(i) / static_cast<double>(c.head_dim));
    const double wavelen = 2 * M_PI / freq;
    double f = 1.0;
    if (wavelen > low_wavelen) {
      f = s.factor;
    } else if (wavelen >= high_wavelen) {
      const double smooth =
          (static_cast<double>(s.original_max_position_embeddings) / wavelen - s.low_freq_factor) /
          (s.high_freq_factor - s.low_freq_factor);
      f = 1.0 / ((1 - smooth) / s.factor + smooth);
    }
    out.push_back(static_cast<float>(f));
  }
  return out;
}

void add_model_metadata(checkpoint::GgufWriter& w, const Source& s, GgmlType type) {
  const model::LlamaConfig& c = s.config;
  w.add_string("general.architecture", "llama");
  w.add_string("general.type", "model");
  w.add_string("general.name", s.name);
  w.add_u32("general.file_type", type == GgmlType::kF32 ? 0 : type == GgmlType::kF16 ? 1 : 32);
  const std::pair<const char*, int64_t> counts[] = {
      {"llama.context_length", c.max_position_embeddings}, {"llama.embedding_length", c.hidden_size},
      {"llama.block_count", c.num_hidden_layers},          {"llama.feed_forward_length", c.intermediate_size},
      {"llama.attention.head_count", c.num_attention_heads}, {"llama.attention.head_count_kv", c.num_key_value_heads},
      {"llama.vocab_size", c.vocab_size},                  {"llama.rope.dimension_count", c.head_dim},
      {"llama.attention.key_length", c.head_dim},          {"llama.attention.value_length", c.head_dim}};
  for (const auto& [key, value] : counts) w.add_u32(key, static_cast<uint32_t>(value));
  w.add_f32("llama.rope.freq_base", static_cast<float>(c.rope_theta));
  w.add_f32("llama.attention.layer_norm_rms_epsilon", static_cast<float>(c.rms_norm_eps));
  if (c.rope_scaling.type == "linear") {
    w.add_string("llama.rope.scaling.type", "linear");
    w.add_f32("llama.rope.scaling.factor", static_cast<float>(c.rope_scaling.factor));
  }
}

void add_vocab_metadata(checkpoint::GgufWriter& w, const Vocab& v) {
  w.add_string("tokenizer.ggml.model", v.model);
  w.add_string("tokenizer.ggml.pre", v.pre);
  w.add_strings("tokenizer.ggml.tokens", v.tokens);
  if (!v.scores.empty()) w.add_f32s("tokenizer.ggml.scores", v.scores);
  w.add_i32s("tokenizer.ggml.token_type", v.types);
  if (!v.merges.empty()) w.add_strings("tokenizer.ggml.merges", v.merges);
  for (const auto& [key, id] : {std::pair{"tokenizer.ggml.bos_token_id", v.bos}, std::pair{"tokenizer.ggml.eos_token_id", v.eos},
                                std::pair{"tokenizer.ggml.unknown_token_id", v.unk},
                                std::pair{"tokenizer.ggml.padding_token_id", v.pad}})
    if (id) w.add_u32(key, static_cast<uint32_t>(*id));
  if (v.add_bos) w.add_bool("tokenizer.ggml.add_bos_token", *v.add_bos);
  if (v.add_eos) w.add_bool("tokenizer.ggml.add_eos_token", *v.add_eos);
  if (!v.chat_template.empty()) w.add_string("tokenizer.chat_template", v.chat_template);
}

}  // namespace

void export_gguf(const std::string& src, const std::string& out, const std::string& dtype, const std::string& tokenizer) {
  const GgmlType type = dtype == "f32" ? GgmlType::kF32 : dtype == "f16" ? GgmlType::kF16 : GgmlType::kBF16;
  std::error_code ec;
  ST_CHECK(!fs::exists(fs::symlink_status(out, ec)), ErrorKind::kIo,
           "{} exists: choose a new path (no conversion writes over a file or folder)", out);
  Source s = fs::exists(src + "/manifest.json") ? open_checkpoint(src) : open_folder(src);
  if (!tokenizer.empty()) s.tokenizer = tokenizer;
  ST_CHECK(!s.tokenizer.empty() && fs::exists(s.tokenizer), ErrorKind::kConfig,
           "no tokenizer.json for {}{}: give --tokenizer (llama.cpp needs the vocabulary in the file)", src,
           s.tokenizer.empty() ? "" : fmt::format(" ({} is missing)", s.tokenizer));
  const model::LlamaConfig& c = s.config;
  ST_CHECK(c.rope_scaling.type.empty() || c.rope_scaling.type == "linear" || c.rope_scaling.type == "llama3",
           ErrorKind::kConfig, "{}: rope_scaling type \"{}\" has no GGUF form here", src, c.rope_scaling.type);
  ST_CHECK(!(c.attention_bias && c.num_attention_heads * c.head_dim != c.hidden_size), ErrorKind::kConfig,
           "{}: llama.cpp takes attention biases only where heads x head_dim equals hidden_size ({} x {} != {})", src,
           c.num_attention_heads, c.head_dim, c.hidden_size);
  Vocab vocab = read_vocab(s.tokenizer, c.vocab_size);
  // The format the model was trained in, not whatever the tokenizer's folder holds: Meta's exact
  // template where the folder's is it, else shardtune's own of that format.
  if (s.trained_chat && data::known_chat_template(vocab.chat_template) != s.trained_chat) {
    fmt::print(stderr, "chat template: the job trained in the {} chat format, which the template beside {} is not; "
                       "the file gets shardtune's {} template\n",
               data::chat_style_name(*s.trained_chat), s.tokenizer, data::chat_style_name(*s.trained_chat));
    vocab.chat_template = data::chat_template_text(*s.trained_chat);
  }

  checkpoint::GgufWriter w(out);
  add_model_metadata(w, s, type);
  add_vocab_metadata(w, vocab);
  // The tensors in Hugging Face's order; matrices in the chosen type, 1-D tensors (norms, biases) in f32.
  model::LlamaForCausalLM skeleton(c, at::TensorOptions().device(at::kMeta));
  std::vector<std::pair<std::string, GgmlType>> order;
  uint64_t total = 0;
  if (c.rope_scaling.type == "llama3")
    w.add_tensor("rope_freqs.weight", {c.head_dim / 2}, GgmlType::kF32);
  for (const model::NamedParam& p : skeleton.named_parameters()) {
    const GgmlType t = p.tensor->dim() == 1 ? GgmlType::kF32 : type;
    w.add_tensor(gguf_name(p.name), p.tensor->sizes().vec(), t);
    order.emplace_back(p.name, t);
    total += checkpoint::ggml_bytes(t, p.tensor->numel());
  }
  w.begin();
  if (c.rope_scaling.type == "llama3") {
    const std::vector<float> factors = llama3_rope_factors(c);
    w.write_tensor(reinterpret_cast<const uint8_t*>(factors.data()), factors.size() * 4);
  }
  common::Progress progress(tool_progress("exporting", static_cast<int64_t>(total)));
  std::vector<uint8_t> bytes;
  for (const auto& [name, t] : order) {
    at::Tensor x = s.read(name).contiguous();
    const bool q = name.find("self_attn.q_proj.") != std::string::npos, k = name.find("self_attn.k_proj.") != std::string::npos;
    if (q || k) x = interleave_heads(x, q ? c.num_attention_heads : c.num_key_value_heads);
    bytes.resize(checkpoint::ggml_bytes(t, x.numel()));
    checkpoint::encode_values(x.data_ptr<float>(), x.numel(), t, bytes.data());
    w.write_tensor(bytes.data(), bytes.size());
    progress.add(static_cast<int64_t>(bytes.size()));
  }
  w.commit();
  progress.finish(fmt::format("exported {} ({}, tokenizer \"{}\"{})", out, dtype, vocab.model,
                              vocab.chat_template.empty() ? "" : ", chat template"));
}

}  // namespace shardtune::tools
