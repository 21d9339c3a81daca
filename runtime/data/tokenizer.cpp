#include "runtime/data/tokenizer.h"

#include <fmt/format.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "common/error.h"
#include "common/file_io.h"
#include "common/strict_json.h"
#include "runtime/data/added_tokens.h"
#include "runtime/data/bpe.h"
#include "runtime/data/regex_split.h"
#include "runtime/data/utf8.h"

namespace shardtune::data {
namespace {

using common::ErrorKind;
using nlohmann::json;

// GPT-2's byte-level alphabet: printable bytes stand for themselves, the rest for 256 + n.
struct ByteLevelAlphabet {
  std::string byte_char[256];               // UTF-8 of the character that stands for each byte
  std::unordered_map<char32_t, uint8_t> char_byte;
  ByteLevelAlphabet() {
    char32_t extra = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      const char32_t c = printable ? static_cast<char32_t>(b) : extra++;
      append_utf8(byte_char[b], c);
      char_byte[c] = static_cast<uint8_t>(b);
    }
  }
};

const ByteLevelAlphabet& alphabet() {
  static const ByteLevelAlphabet a;
  return a;
}

// GPT-2's pre-tokenizer regex, used by ByteLevel with use_regex = true.
constexpr const char* kGpt2Pattern = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

struct NormalizerStep {
  enum Kind { kPrepend, kReplace } kind;
  std::string a = {}, b = {};  // prepend: a; replace: a -> b
};

struct PreTokenizerStep {
  enum Kind { kSplit, kByteLevel } kind;
  std::shared_ptr<RegexSplitter> regex;  // kSplit, or kByteLevel with use_regex
  bool add_prefix_space = false;
};

struct DecoderStep {
  enum Kind { kByteLevel, kReplace, kByteFallback, kFuse, kStrip } kind;
  std::string a = {}, b = {};
  int start = 0, stop = 0;
};

[[noreturn]] void unsupported(const std::string& name, const std::string& where, const json& node) {
  common::raise(ErrorKind::kConfig, fmt::format("{}: {} {} is not supported (supported: the parts Llama 2 and Llama 3 "
                                                "tokenizers use)",
                                                name, where, node.dump().substr(0, 200)));
}

std::string string_pattern(const std::string& name, const json& pattern) {
  if (pattern.contains("String")) return pattern.at("String").get<std::string>();
  unsupported(name, "pattern", pattern);
}

}  // namespace

struct Tokenizer::Impl {
  std::string name;
  std::unique_ptr<BpeModel> model;
  std::vector<AddedToken> added;
  AddedTokenSplitter raw_splitter, normalized_splitter;
  std::vector<NormalizerStep> normalizer;
  std::vector<PreTokenizerStep> pre_tokenizer;
  std::vector<DecoderStep> decoder;
  bool byte_level = false;  // the model sees byte-level characters
  std::vector<std::string> id_to_token;
  std::vector<bool> is_added;
  std::optional<int32_t> bos, eos;

  void parse_normalizer(const json& n) {
    if (n.is_null()) return;
    const std::string type = n.at("type");
    if (type == "Sequence") {
      for (const json& s : n.at("normalizers")) parse_normalizer(s);
    } else if (type == "Prepend") {
      normalizer.push_back({NormalizerStep::kPrepend, n.at("prepend"), ""});
    } else if (type == "Replace") {
      normalizer.push_back({NormalizerStep::kReplace, string_pattern(name, n.at("pattern")), n.at("content")});
    } else {
      unsupported(name, "normalizer", n);
    }
  }

  void parse_pre_tokenizer(const json& p) {
    if (p.is_null()) return;
    const std::string type = p.at("type");
    if (type == "Sequence") {
      for (const json& s : p.at("pretokenizers")) parse_pre_tokenizer(s);
    } else if (type == "Split") {
      if (p.value("behavior", "") != "Isolated" || p.value("invert", false) || !p.at("pattern").contains("Regex"))
        unsupported(name, "pre-tokenizer", p);
      pre_tokenizer.push_back({PreTokenizerStep::kSplit, std::make_shared<RegexSplitter>(p.at("pattern").at("Regex")), false});
    } else if (type == "ByteLevel") {
      PreTokenizerStep step{PreTokenizerStep::kByteLevel, nullptr, p.value("add_prefix_space", false)};
      if (p.value("use_regex", true)) step.regex = std::make_shared<RegexSplitter>(kGpt2Pattern);
      pre_tokenizer.push_back(step);
      byte_level = true;
    } else {
      unsupported(name, "pre-tokenizer", p);
    }
  }

  void parse_decoder(const json& d) {
    if (d.is_null()) return;
    const std::string type = d.at("type");
    if (type == "Sequence") {
      for (const json& s : d.at("decoders")) parse_decoder(s);
    } else if (type == "ByteLevel") {
      decoder.push_back({DecoderStep::kByteLevel});
    } else if (type == "Replace") {
      decoder.push_back({DecoderStep::kReplace, string_pattern(name, d.at("pattern")), d.at("content")});
    } else if (type == "ByteFallback") {
      decoder.push_back({DecoderStep::kByteFallback});
    } else if (type == "Fuse") {
      decoder.push_back({DecoderStep::kFuse});
    } else if (type == "Strip") {
      decoder.push_back({DecoderStep::kStrip, d.at("content"), "", d.at("start"), d.at("stop")});
    } else {
      unsupported(name, "decoder", d);
    }
  }

  std::string normalize(std::string_view text) const {
    std::string s(text);
    for (const NormalizerStep& n : normalizer) {
      if (n.kind == NormalizerStep::kPrepend) {
        if (!s.empty()) s = n.a + s;
      } else if (!n.a.empty()) {
        std::string out;
        for (size_t pos = 0;;) {
          const size_t hit = s.find(n.a, pos);
          out.append(s, pos, hit == std::string::npos ? std::string::npos : hit - pos);
          if (hit == std::string::npos) break;
          out += n.b;
          pos = hit + n.a.size();
        }
        s = std::move(out);
      }
    }
    return s;
  }

  // Pre-tokenizes and runs the model on one plain section.
  void encode_plain(std::string_view text, std::vector<int32_t>& out) const {
    std::string prefixed;
    std::vector<std::string_view> pieces{text};
    std::vector<std::string_view> next;
    for (const PreTokenizerStep& step : pre_tokenizer) {
      if (step.kind == PreTokenizerStep::kByteLevel && step.add_prefix_space && !text.empty() && text[0] != ' ' &&
          pieces.size() == 1 && pieces[0].data() == text.data()) {
        prefixed = " " + std::string(text);
        pieces = {prefixed};
      }
      if (!step.regex) continue;
      next.clear();
      for (const std::string_view p : pieces) step.regex->split(p, next);
      pieces.swap(next);
    }
    std::vector<int32_t> symbols;
    std::vector<std::string_view> symbol_text;
    std::string word;
    for (const std::string_view piece : pieces) {
      symbols.clear();
      symbol_text.clear();
      if (byte_level) {
        word.clear();
        for (const char c : piece) {
          const std::string& ch = alphabet().byte_char[static_cast<unsigned char>(c)];
          word += ch;
          const auto id = model->id(ch);
          symbols.push_back(id ? *id : -1);
          symbol_text.push_back(ch);
        }
        model->encode_word(word, symbols, symbol_text, out);
      } else {
        for (size_t pos = 0; pos < piece.size();) {
          const size_t start = pos;
          next_code_point(piece, pos);
          const std::string_view ch = piece.substr(start, pos - start);
          const auto id = model->id(ch);
          symbols.push_back(id ? *id : -1);
          symbol_text.push_back(ch);
        }
        model->encode_word(piece, symbols, symbol_text, out);
      }
    }
  }
};

namespace {

// A token as it appears in an error: JSON-quoted (control characters escaped), cut if long.
std::string shown(const std::string& text) {
  const std::string quoted = json(text).dump(-1, ' ', false, json::error_handler_t::replace);
  return quoted.size() > 60 ? quoted.substr(0, 57) + "...\"" : quoted;
}

// A token id as the file gives it, refused unless an integer in [0, kMaxTokenId].
int32_t token_id(const json& v, const std::string& file, const std::string& token, std::string_view where) {
  const bool in_range = v.is_number_unsigned() ? v.get<uint64_t>() <= static_cast<uint64_t>(kMaxTokenId)
                                               : v.is_number_integer() && v.get<int64_t>() >= 0 &&
                                                     v.get<int64_t>() <= kMaxTokenId;
  ST_CHECK(in_range, ErrorKind::kConfig, "{}: {} {} has the id {}: token ids must be integers from 0 to {}", file, where,
           shown(token), v.dump(), kMaxTokenId);
  return static_cast<int32_t>(v.get<int64_t>());
}

}  // namespace

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

Tokenizer Tokenizer::from_file(const std::string& tokenizer_json) {
  ST_CHECK(!(tokenizer_json.size() > 6 && tokenizer_json.compare(tokenizer_json.size() - 6, 6, ".model") == 0),
           ErrorKind::kConfig,
           "{} is a SentencePiece model: convert it once with `shardtune-tokenize {} --write-json tokenizer.json` "
           "(shardtune-rank does this itself for [data] tokenizer)",
           tokenizer_json, tokenizer_json);
  const std::filesystem::path config = std::filesystem::path(tokenizer_json).parent_path() / "tokenizer_config.json";
  return from_json(common::read_file(tokenizer_json, ErrorKind::kConfig, "the tokenizer"), tokenizer_json,
                   std::filesystem::exists(config) ? common::read_file(config.string(), ErrorKind::kConfig) : std::string());
}

namespace {

// The document, refused if nested deeper than any tokenizer file is (HF's nest a few levels).
json parse_limited(std::string_view text, const std::string& name) {
  common::StrictJson parsed = common::parse_json_strict(text.data(), text.data() + text.size());
  ST_CHECK(!parsed.too_deep, ErrorKind::kConfig, "{}: nested more than {} deep: not a tokenizer file", name,
           common::kMaxJsonDepth);
  return std::move(parsed.value);
}

}  // namespace

Tokenizer Tokenizer::from_json(std::string_view text, const std::string& name, std::string_view config_text) {
  auto impl = std::make_unique<Impl>();
  impl->name = name;
  try {
    const json j = parse_limited(text, name);
    const json& m = j.at("model");
    if (m.value("type", "") != "BPE" || !m.value("dropout", json()).is_null() ||
        !m.value("continuing_subword_prefix", json()).is_null() || !m.value("end_of_word_suffix", json()).is_null())
      unsupported(name, "model", json{{"type", m.value("type", "")}});
    BpeConfig bpe;
    const json& vocab = m.at("vocab");
    ST_CHECK(vocab.is_object(), ErrorKind::kConfig, "{}: model.vocab is not an object of token: id", name);
    bpe.vocab.reserve(vocab.size());
    for (const auto& [token, id] : vocab.items()) bpe.vocab.emplace(token, token_id(id, name, token, "vocabulary entry"));
    for (const json& merge : m.at("merges")) {
      if (merge.is_array()) {
        bpe.merges.emplace_back(merge.at(0).get<std::string>(), merge.at(1).get<std::string>());
      } else {
        const std::string s = merge.get<std::string>();
        const size_t space = s.find(' ');
        ST_CHECK(space != std::string::npos, ErrorKind::kConfig, "{}: merge \"{}\" has no space", name, s);
        bpe.merges.emplace_back(s.substr(0, space), s.substr(space + 1));
      }
    }
    if (m.contains("unk_token") && !m.at("unk_token").is_null()) bpe.unk_token = m.at("unk_token").get<std::string>();
    bpe.byte_fallback = m.value("byte_fallback", false);
    bpe.ignore_merges = m.value("ignore_merges", false);
    impl->model = std::make_unique<BpeModel>(std::move(bpe));

    impl->parse_normalizer(j.value("normalizer", json()));
    impl->parse_pre_tokenizer(j.value("pre_tokenizer", json()));
    impl->parse_decoder(j.value("decoder", json()));

    std::vector<AddedToken> raw, normalized;
    for (const json& a : j.value("added_tokens", json::array())) {
      const std::string content = a.at("content");
      AddedToken t{content, token_id(a.at("id"), name, content, "added token"), a.value("special", false),
                   a.value("lstrip", false), a.value("rstrip", false), a.value("normalized", false)};
      impl->added.push_back(t);
      if (t.normalized && !impl->normalizer.empty()) {
        t.content = impl->normalize(t.content);
        normalized.push_back(t);
      } else {
        raw.push_back(t);
      }
    }
    impl->raw_splitter = AddedTokenSplitter(raw);
    impl->normalized_splitter = AddedTokenSplitter(normalized);

    // Ids to text: the model's vocabulary, then added tokens (which may extend it).
    int32_t size = impl->model->vocab_size();
    for (const AddedToken& t : impl->added) size = std::max(size, t.id + 1);
    impl->id_to_token.resize(static_cast<size_t>(size));
    impl->is_added.assign(static_cast<size_t>(size), false);
    for (int32_t i = 0; i < impl->model->vocab_size(); ++i) impl->id_to_token[static_cast<size_t>(i)] = impl->model->token(i);
    for (const AddedToken& t : impl->added) {
      impl->id_to_token[static_cast<size_t>(t.id)] = t.content;
      impl->is_added[static_cast<size_t>(t.id)] = true;
    }

    if (!config_text.empty()) {
      const json c = parse_limited(config_text, name + " (tokenizer_config.json)");
      auto special = [&](const char* key) -> std::optional<int32_t> {
        if (!c.contains(key) || c.at(key).is_null()) return std::nullopt;
        const json& v = c.at(key);
        const std::string content = v.is_string() ? v.get<std::string>() : v.at("content").get<std::string>();
        for (const AddedToken& t : impl->added)
          if (t.content == content) return t.id;
        if (auto id = impl->model->id(content)) return id;
        common::raise(ErrorKind::kConfig, fmt::format("{}: tokenizer_config.json {} \"{}\" is not a token", name, key, content));
      };
      impl->bos = special("bos_token");
      impl->eos = special("eos_token");
    }
  } catch (const json::exception& e) {
    common::raise(ErrorKind::kConfig, fmt::format("{}: not a valid tokenizer file: {}", name, e.what()));
  }
  return Tokenizer(std::move(impl));
}

std::vector<int32_t> Tokenizer::encode(std::string_view text) const {
  const Impl& t = *impl_;
  std::string repaired;
  if (!is_valid_utf8(text)) {
    repaired = repair_utf8(text);
    text = repaired;
  }
  std::vector<int32_t> out;
  for (const Section& raw : t.raw_splitter.split(text)) {
    if (raw.added_id >= 0) {
      out.push_back(raw.added_id);
      continue;
    }
    if (raw.text.empty()) continue;
    const std::string normalized = t.normalize(raw.text);
    if (t.normalized_splitter.empty()) {
      t.encode_plain(normalized, out);
      continue;
    }
    for (const Section& s : t.normalized_splitter.split(normalized)) {
      if (s.added_id >= 0) out.push_back(s.added_id);
      else if (!s.text.empty()) t.encode_plain(s.text, out);
    }
  }
  return out;
}

namespace {

// The ByteLevel decoder: each token but the added ones mapped back from the byte alphabet to its
// bytes, all joined and decoded as UTF-8 (U+FFFD where invalid).
std::string byte_level_decode(const std::vector<std::string>& tokens, const std::vector<bool>& added) {
  std::string joined;
  for (size_t i = 0; i < tokens.size(); ++i) {
    const std::string& s = tokens[i];
    if (added[i]) {
      joined += s;
      continue;
    }
    for (size_t pos = 0; pos < s.size();) {
      const size_t start = pos;
      const char32_t c = next_code_point(s, pos);
      const auto it = alphabet().char_byte.find(c);
      if (it != alphabet().char_byte.end()) joined += static_cast<char>(it->second);
      else joined.append(s, start, pos - start);
    }
  }
  return repair_utf8(joined);
}

// Every occurrence of `a` in `s` replaced by `b` (none when `a` is empty).
std::string replace_all(const std::string& s, const std::string& a, const std::string& b) {
  std::string out;
  for (size_t pos = 0;;) {
    const size_t hit = a.empty() ? std::string::npos : s.find(a, pos);
    out.append(s, pos, hit == std::string::npos ? std::string::npos : hit - pos);
    if (hit == std::string::npos) break;
    out += b;
    pos = hit + a.size();
  }
  return out;
}

// The ByteFallback decoder: runs of <0xXX> tokens become their bytes, decoded as UTF-8 (U+FFFD
// where invalid); other tokens stay as they are.
std::vector<std::string> byte_fallback(const std::vector<std::string>& tokens) {
  std::vector<std::string> out;
  std::string bytes;
  auto flush = [&] {
    if (!bytes.empty()) out.push_back(repair_utf8(bytes));
    bytes.clear();
  };
  for (const std::string& s : tokens) {
    if (s.size() == 6 && s.rfind("<0x", 0) == 0 && s[5] == '>' && std::isxdigit(static_cast<unsigned char>(s[3])) &&
        std::isxdigit(static_cast<unsigned char>(s[4]))) {
      bytes += static_cast<char>(std::stoi(s.substr(3, 2), nullptr, 16));
    } else {
      flush();
      out.push_back(s);
    }
  }
  flush();
  return out;
}

}  // namespace

std::string Tokenizer::decode(std::span<const int32_t> ids) const {
  const Impl& t = *impl_;
  std::vector<std::string> tokens;
  std::vector<bool> added;
  for (const int32_t id : ids) {
    ST_CHECK(id >= 0 && id < static_cast<int32_t>(t.id_to_token.size()), ErrorKind::kUsage,
             "token id {} is outside the vocabulary of {} (size {})", id, t.name, t.id_to_token.size());
    tokens.push_back(t.id_to_token[static_cast<size_t>(id)]);
    added.push_back(t.is_added[static_cast<size_t>(id)]);
  }
  for (const DecoderStep& d : t.decoder) {
    switch (d.kind) {
      case DecoderStep::kByteLevel:
        tokens = {byte_level_decode(tokens, added)};
        added = {false};
        break;
      case DecoderStep::kReplace:
        for (std::string& s : tokens) s = replace_all(s, d.a, d.b);
        break;
      case DecoderStep::kByteFallback:
        tokens = byte_fallback(tokens);
        break;
      case DecoderStep::kFuse: {
        std::string joined;
        for (const std::string& s : tokens) joined += s;
        tokens = {joined};
        break;
      }
      case DecoderStep::kStrip:
        for (std::string& s : tokens) {
          int n = d.start;
          while (n-- > 0 && !s.empty() && s.compare(0, d.a.size(), d.a) == 0) s.erase(0, d.a.size());
          n = d.stop;
          while (n-- > 0 && s.size() >= d.a.size() && s.compare(s.size() - d.a.size(), d.a.size(), d.a) == 0)
            s.erase(s.size() - d.a.size());
          break;  // HF strips each token; Llama 2's Strip follows Fuse, so there is one
        }
        break;
    }
  }
  std::string text;
  for (const std::string& s : tokens) text += s;
  return text;
}

std::optional<int32_t> Tokenizer::token_to_id(std::string_view token) const {
  for (const AddedToken& t : impl_->added)
    if (t.content == token) return t.id;
  return impl_->model->id(token);
}

const std::string& Tokenizer::id_to_token(int32_t id) const {
  static const std::string none;
  return id >= 0 && id < static_cast<int32_t>(impl_->id_to_token.size()) ? impl_->id_to_token[static_cast<size_t>(id)] : none;
}

bool Tokenizer::is_added_token(int32_t id) const {
  return id >= 0 && id < static_cast<int32_t>(impl_->is_added.size()) && impl_->is_added[static_cast<size_t>(id)];
}

int32_t Tokenizer::vocab_size() const { return static_cast<int32_t>(impl_->id_to_token.size()); }
std::optional<int32_t> Tokenizer::bos_id() const { return impl_->bos; }
std::optional<int32_t> Tokenizer::eos_id() const { return impl_->eos; }

}  // namespace shardtune::data
