// Byte-pair encoding over a vocabulary and ranked merges, as Hugging Face's BPE model applies
// it: the lowest-ranked adjacent pair merges first, the leftmost of equal pairs first.
// Symbols are token ids, so a merge is one hash lookup.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace shardtune::data {

struct BpeConfig {
  std::unordered_map<std::string, int32_t> vocab;
  std::vector<std::pair<std::string, std::string>> merges;  // by rank
  std::optional<std::string> unk_token;
  bool byte_fallback = false;  // symbols outside the vocabulary become <0xXX> byte tokens
  bool ignore_merges = false;  // a word that is itself in the vocabulary is one token
};

class BpeModel {
 public:
  // Throws common::Error(kConfig) naming the merge whose parts or result are not in the vocabulary.
  explicit BpeModel(BpeConfig config);

  // Appends the ids of one pre-tokenized word. `symbols` are its initial symbols' ids (-1: not
  // in the vocabulary), `symbol_text` their texts (used only for byte fallback), `word` the
  // whole word (for ignore_merges).
  void encode_word(std::string_view word, std::vector<int32_t> symbols, const std::vector<std::string_view>& symbol_text,
                   std::vector<int32_t>& out) const;

  std::optional<int32_t> id(std::string_view token) const;
  const std::string& token(int32_t id) const;  // "" for an id that is not in the vocabulary
  int32_t vocab_size() const { return static_cast<int32_t>(id_to_token_.size()); }
  // The byte token <0xXX> of `byte`, or -1.
  int32_t byte_token(unsigned char byte) const { return byte_tokens_[byte]; }

 private:
  struct Merge {
    int32_t rank;
    int32_t result;
  };
  static uint64_t pair_key(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }
  void merge(std::vector<int32_t>& symbols) const;

  std::unordered_map<std::string, int32_t> vocab_;
  std::vector<std::string> id_to_token_;
  std::unordered_map<uint64_t, Merge> merges_;
  int32_t unk_ = -1;
  bool byte_fallback_ = false;
  bool ignore_merges_ = false;
  int32_t byte_tokens_[256];
};

}  // namespace shardtune::data
