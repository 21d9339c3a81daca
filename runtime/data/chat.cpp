#include "runtime/data/chat.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "common/error.h"
#include "common/file_io.h"
#include "common/sha256.h"
#include "runtime/data/utf8.h"

namespace shardtune::data {
namespace {

using common::ErrorKind;

// The chat templates shardtune renders exactly, by the SHA-256 of their text (one trailing newline
// dropped, as Jinja drops it): Meta's, as their tokenizer_config.json files hold them. Each is
// checked against Jinja by tests/tokenizer/chat_template_test.py.
struct KnownTemplate {
  const char* sha256;
  ChatStyle style;
  const char* name;
};
constexpr KnownTemplate kKnownTemplates[] = {
    {"ba03a121d097859c7b5b9cd03af99aafe95275210d2876f642ad9929a150f122", ChatStyle::kLlama3, "Llama 3 Instruct"},
    {"93c0e9aa3629bbd77e68dbc0f5621f6e6b23aa8d74b932595cdb8d64684526d7", ChatStyle::kLlama31, "Llama 3.1/3.3 Instruct"},
    {"e8d5b5a546d3f19df16a5320c614fab05bdc4edd50e850f1afd947b503ea41cf", ChatStyle::kLlama2, "Llama 2 chat"},
};
// Llama 3.2 Instruct's template writes the day it runs on into every system turn (strftime_now):
// the same data would render differently each day, so it is not taken as it is.
constexpr const char* kLlama32Sha256 = "d82792f95932f1c9cef5c4bd992f171225e3bf8c7b609b4557c9e1ec96be819f";

std::string template_sha256(std::string_view text) {
  if (!text.empty() && text.back() == '\n') text.remove_suffix(1);
  return common::sha256_hex(text);
}

bool is_python_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

// The template text of the tokenizer's folder, and the file it came from; empty when none.
std::pair<std::string, std::string> chat_template_beside(const std::string& tokenizer_path) {
  const std::filesystem::path dir = std::filesystem::path(tokenizer_path).parent_path();
  const std::string config = (dir / "tokenizer_config.json").string(), jinja = (dir / "chat_template.jinja").string();
  if (std::filesystem::exists(config)) {
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(common::read_file(config, ErrorKind::kConfig, "the tokenizer config"));
    } catch (const nlohmann::json::exception& e) {
      common::raise(ErrorKind::kConfig, fmt::format("{}: not valid JSON: {}", config, escaped(e.what())));
    }
    if (j.is_object() && j.contains("chat_template")) {
      const nlohmann::json& t = j.at("chat_template");
      if (t.is_string()) return {t.get<std::string>(), config};
      // Several named templates: the default one is the chat template.
      if (t.is_array())
        for (const nlohmann::json& named : t)
          if (named.is_object() && named.value("name", "") == "default" && named.contains("template") &&
              named.at("template").is_string())
            return {named.at("template").get<std::string>(), config + " (its \"default\" template)"};
      common::raise(ErrorKind::kConfig,
                    fmt::format("{}: \"chat_template\" is neither a string nor a list holding a \"default\" template",
                                config));
    }
  }
  if (std::filesystem::exists(jinja)) return {common::read_file(jinja, ErrorKind::kConfig, "the chat template"), jinja};
  return {};
}

void add(std::vector<ChatPiece>& out, std::string text, bool special, bool learned) {
  if (!text.empty()) out.push_back({std::move(text), special, learned});
}

// The conversation's first BOS is never learned, as no other format's BOS is, even with train_on =
// "all": packed after another example, it would teach that an example's end is followed by BOS.

// Llama 3: a header per turn, its content trimmed, <|eot_id|>.
void render_llama3(const std::vector<Turn>& turns, const ChatOptions& o, std::vector<ChatPiece>& out) {
  const bool all = o.train_on_all;
  add(out, o.bos, true, false);
  auto header = [&](const std::string& role, bool learned) {
    add(out, "<|start_header_id|>", true, learned);
    add(out, role, false, learned);
    add(out, "<|end_header_id|>", true, learned);
    add(out, "\n\n", false, learned);
  };
  size_t first = 0;
  if (o.style == ChatStyle::kLlama31) {
    // The system turn is always there, with the template's default knowledge and date lines.
    const bool system = !turns.empty() && turns[0].role == "system";
    header("system", all);
    add(out,
        fmt::format("Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n{}",
                    system ? python_strip(turns[0].content) : std::string_view()),
        false, all);
    add(out, "<|eot_id|>", true, all);
    first = system ? 1 : 0;
  }
  for (size_t i = first; i < turns.size(); ++i) {
    const bool assistant = turns[i].role == "assistant";
    header(turns[i].role, all);
    add(out, std::string(python_strip(turns[i].content)), false, all || assistant);
    add(out, "<|eot_id|>", true, all || assistant);
  }
  if (o.generation_prompt) header("assistant", all);
}

// Llama 2: <s>[INST] user [/INST] assistant </s>, the system prompt in the first user turn.
void render_llama2(const std::vector<Turn>& turns, const ChatOptions& o, std::vector<ChatPiece>& out) {
  const bool all = o.train_on_all;
  const bool system = !turns.empty() && turns[0].role == "system";
  const size_t start = out.size();
  for (size_t i = system ? 1 : 0; i < turns.size(); ++i) {
    if (turns[i].role == "user") {
      const std::string content =
          i == 1 && system ? fmt::format("<<SYS>>\n{}\n<</SYS>>\n\n{}", turns[0].content, turns[i].content)
                           : turns[i].content;
      add(out, o.bos, true, all && out.size() > start);  // a later turn's BOS is the conversation's own
      add(out, fmt::format("[INST] {} [/INST]", python_strip(content)), false, all);
    } else {
      add(out, fmt::format(" {} ", python_strip(turns[i].content)), false, true);
      add(out, o.eos, true, true);
    }
  }
}

size_t common_prefix(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  return static_cast<size_t>(std::mismatch(a.begin(), a.end(), b.begin(), b.end()).first - a.begin());
}

}  // namespace

std::string chat_template_text(ChatStyle style) {
  // One line of tags: no whitespace of the template's own, whatever the renderer's trim settings.
  const std::string turns =
      "{% for message in rest %}<|start_header_id|>{{ message['role'] }}<|end_header_id|>\n\n"
      "{{ message['content'] | trim }}<|eot_id|>{% endfor %}"
      "{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}";
  switch (style) {
    case ChatStyle::kLlama3: return "{{ bos_token }}{% set rest = messages %}" + turns;
    case ChatStyle::kLlama31:
      return "{{ bos_token }}{% if messages and messages[0]['role'] == 'system' %}"
             "{% set system = messages[0]['content'] | trim %}{% set rest = messages[1:] %}"
             "{% else %}{% set system = '' %}{% set rest = messages %}{% endif %}"
             "<|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\n"
             "Today Date: 26 Jul 2024\n\n{{ system }}<|eot_id|>" +
             turns;
    case ChatStyle::kLlama2:
      return "{% if messages and messages[0]['role'] == 'system' %}{% set system = messages[0]['content'] %}"
             "{% set rest = messages[1:] %}{% else %}{% set system = false %}{% set rest = messages %}{% endif %}"
             "{% for message in rest %}{% if message['role'] == 'user' %}"
             "{% if loop.index0 == 0 and system != false %}"
             "{% set content = '<<SYS>>\\n' + system + '\\n<</SYS>>\\n\\n' + message['content'] %}"
             "{% else %}{% set content = message['content'] %}{% endif %}"
             "{{ bos_token + '[INST] ' + content | trim + ' [/INST]' }}"
             "{% else %}{{ ' ' + message['content'] | trim + ' ' + eos_token }}{% endif %}{% endfor %}";
  }
  return "";
}

std::string_view chat_style_name(ChatStyle style) {
  switch (style) {
    case ChatStyle::kLlama3: return "llama3";
    case ChatStyle::kLlama31: return "llama3.1";
    case ChatStyle::kLlama2: return "llama2";
  }
  return "?";
}

std::optional<ChatStyle> known_chat_template(std::string_view text) {
  const std::string sha = template_sha256(text);
  for (const KnownTemplate& k : kKnownTemplates)
    if (sha == k.sha256) return k.style;
  return std::nullopt;
}

ChatChoice choose_chat_style(job::ChatFormat setting, const std::string& tokenizer_path) {
  switch (setting) {
    case job::ChatFormat::kLlama3: return {ChatStyle::kLlama3, "[data] chat_format = \"llama3\""};
    case job::ChatFormat::kLlama31: return {ChatStyle::kLlama31, "[data] chat_format = \"llama3.1\""};
    case job::ChatFormat::kLlama2: return {ChatStyle::kLlama2, "[data] chat_format = \"llama2\""};
    case job::ChatFormat::kAuto: break;
  }
  const auto [text, from] = chat_template_beside(tokenizer_path);
  ST_CHECK(!from.empty(), ErrorKind::kConfig,
           "[data] chat_format = \"auto\" finds no chat template beside {} (no \"chat_template\" in "
           "tokenizer_config.json, no chat_template.jinja). HINT: set [data] chat_format = \"llama3\", \"llama3.1\" "
           "or \"llama2\"",
           tokenizer_path);
  const std::optional<ChatStyle> style = known_chat_template(text);
  const std::string sha = template_sha256(text);
  ST_CHECK(sha != kLlama32Sha256, ErrorKind::kConfig,
           "[data] chat_format = \"auto\": the chat template of {} is Llama 3.2 Instruct's, which writes the day it "
           "is rendered on into every system turn (\"Today Date: ...\"), so the same data would train differently "
           "each day. HINT: set [data] chat_format = \"llama3.1\": the same text with the template's own fixed date "
           "(26 Jul 2024), as it renders where no clock is given to it",
           from);
  ST_CHECK(style.has_value(), ErrorKind::kConfig,
           "[data] chat_format = \"auto\": the chat template of {} (SHA-256 {}) is not one shardtune renders exactly "
           "(Meta's Llama 3, 3.1/3.3 and Llama 2 chat templates). HINT: if the model speaks one of those formats, set "
           "[data] chat_format = \"llama3\", \"llama3.1\" or \"llama2\"",
           from, sha);
  for (const KnownTemplate& k : kKnownTemplates)
    if (k.style == *style) return {*style, fmt::format("the chat template of {} ({}'s)", from, k.name)};
  return {*style, from};
}

ChatOptions chat_options(ChatStyle style, const Tokenizer& tokenizer, const std::string& tokenizer_path) {
  auto text_of = [&](std::optional<int32_t> id, const char* what) {
    ST_CHECK(id.has_value(), ErrorKind::kConfig,
             "{} names no {} token, which chat format {} writes: set bos_token and eos_token in the "
             "tokenizer_config.json beside it",
             tokenizer_path, what, chat_style_name(style));
    return tokenizer.id_to_token(*id);
  };
  ChatOptions o;
  o.style = style;
  o.bos = text_of(tokenizer.bos_id(), "BOS");
  if (style == ChatStyle::kLlama2) o.eos = text_of(tokenizer.eos_id(), "EOS");
  return o;
}

std::vector<ChatPiece> render_chat(const std::vector<Turn>& turns, const ChatOptions& options) {
  std::vector<ChatPiece> out;
  if (options.style == ChatStyle::kLlama2) render_llama2(turns, options, out);
  else render_llama3(turns, options, out);
  return out;
}

Example chat_example(const Tokenizer& tokenizer, const std::vector<ChatPiece>& pieces, int64_t max_tokens,
                     const std::string& where) {
  std::string full;
  for (const ChatPiece& p : pieces) full += p.text;
  Example e;
  e.ids = tokenizer.encode(full);
  // The tokenizer splits the text at special tokens first and encodes what lies between them on its
  // own; a learned piece inside such a segment starts at the first token that encoding the segment
  // only up to the piece does not reproduce.
  std::vector<int32_t> ids, labels;
  std::string segment;
  std::vector<std::pair<size_t, bool>> starts;  // (offset in the segment, learned) of each piece
  auto flush = [&] {
    if (segment.empty()) return;
    const std::vector<int32_t> seg = tokenizer.encode(segment);
    std::vector<size_t> first(starts.size() + 1, seg.size());
    first[0] = 0;
    for (size_t k = 1; k < starts.size(); ++k)
      first[k] = starts[k].second == starts[k - 1].second
                     ? first[k - 1]
                     : std::max(first[k - 1], common_prefix(tokenizer.encode(segment.substr(0, starts[k].first)), seg));
    for (size_t k = 0; k < starts.size(); ++k)
      for (size_t t = first[k]; t < std::max(first[k], first[k + 1]); ++t) labels.push_back(starts[k].second ? seg[t] : kIgnoreLabel);
    ids.insert(ids.end(), seg.begin(), seg.end());
    segment.clear();
    starts.clear();
  };
  for (const ChatPiece& p : pieces) {
    if (!p.special) {
      starts.emplace_back(segment.size(), p.learned);
      segment += p.text;
      continue;
    }
    flush();
    const std::optional<int32_t> id = tokenizer.token_to_id(p.text);
    ST_CHECK(id && tokenizer.is_added_token(*id), ErrorKind::kConfig,
             "{}: the tokenizer has no special token {}, which the chat format uses: a tokenizer of another model "
             "family? HINT: check [data] chat_format and [data] tokenizer",
             where, escaped(p.text));
    ids.push_back(*id);
    labels.push_back(p.learned ? *id : kIgnoreLabel);
  }
  flush();
  ST_CHECK(ids == e.ids && labels.size() == ids.size(), ErrorKind::kInternal,
           "{}: the conversation's text encodes to {} ids whole but {} in pieces", where, e.ids.size(), ids.size());
  e.labels = std::move(labels);
  if (max_tokens > 0 && static_cast<int64_t>(e.ids.size()) > max_tokens) {
    e.ids.resize(static_cast<size_t>(max_tokens));
    e.labels.resize(static_cast<size_t>(max_tokens));
  }
  return e;
}

std::string_view python_strip(std::string_view text) {
  size_t begin = 0;
  while (begin < text.size()) {
    size_t next = begin;
    if (!is_python_space(next_code_point(text, next))) break;
    begin = next;
  }
  size_t end = text.size();
  while (end > begin) {
    size_t start = end - 1;
    while (start > begin && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
    size_t at = start;
    if (!is_python_space(next_code_point(text, at))) break;
    end = start;
  }
  return text.substr(begin, end - begin);
}

}  // namespace shardtune::data
