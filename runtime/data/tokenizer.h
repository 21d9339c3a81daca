// A Hugging Face `tokenizer.json`, encoded and decoded exactly as Hugging Face's tokenizers do:
// added and special tokens found in the raw text, the normalizer (Prepend, Replace), the
// pre-tokenizer (Split by regex, ByteLevel), the BPE model (merges by rank, ignore_merges,
// byte fallback, unk), and the decoder (ByteLevel; Replace, ByteFallback, Fuse, Strip). This
// covers Llama 3 / 3.1 / 3.2 (byte-level BPE) and Llama 2 / Mistral style tokenizer.json files
// (SentencePiece-style BPE with byte fallback). Anything else is refused by name. A SentencePiece
// tokenizer.model is converted to tokenizer.json first (sentencepiece_model.h): libsentencepiece
// links a protobuf that clashes with LibTorch's, so it stays out of the ranks.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace shardtune::data {

// The largest token id a tokenizer file may use. No vocabulary comes near 16.7 million tokens; an
// id beyond this is a broken or hostile file, which taken at its word would overflow or allocate
// gigabytes for the id-to-text table.
inline constexpr int32_t kMaxTokenId = (1 << 24) - 1;

class Tokenizer {
 public:
  // Reads tokenizer.json (and tokenizer_config.json beside it, if any, for BOS/EOS). Throws
  // common::Error(kConfig) naming the file and the unsupported or malformed part.
  static Tokenizer from_file(const std::string& tokenizer_json);
  static Tokenizer from_json(std::string_view json, const std::string& name, std::string_view config_json = {});

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  // Ids of `text` without BOS/EOS. Special tokens written in the text are recognised. Invalid
  // UTF-8 is first repaired the way browsers and Node.js decode it (U+FFFD). Thread-safe.
  std::vector<int32_t> encode(std::string_view text) const;
  // Text of `ids`, special tokens included as written. decode(encode(x)) == x for valid UTF-8.
  std::string decode(std::span<const int32_t> ids) const;

  std::optional<int32_t> token_to_id(std::string_view token) const;
  const std::string& id_to_token(int32_t id) const;
  int32_t vocab_size() const;
  bool is_added_token(int32_t id) const;  // an added or special token (<|eot_id|>, <s>, ...)
  std::optional<int32_t> bos_id() const;
  std::optional<int32_t> eos_id() const;

 private:
  struct Impl;
  explicit Tokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace shardtune::data
