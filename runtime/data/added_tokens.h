// Added and special tokens (`<|begin_of_text|>`, `<s>`, ...) found in text before anything else
// runs, as Hugging Face does: at each position the longest token that starts there.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace shardtune::data {

struct AddedToken {
  std::string content;
  int32_t id = 0;
  bool special = false;
  bool lstrip = false;      // whitespace before it is dropped
  bool rstrip = false;      // whitespace after it is dropped
  bool normalized = false;  // matched after normalization instead of in the raw text
};

struct Section {
  std::string_view text;
  int32_t added_id = -1;  // >= 0: this section is that added token
};

class AddedTokenSplitter {
 public:
  AddedTokenSplitter() = default;
  explicit AddedTokenSplitter(std::vector<AddedToken> tokens);
  bool empty() const { return tokens_.empty(); }
  // Cuts `text` into plain sections and added tokens, applying lstrip/rstrip.
  std::vector<Section> split(std::string_view text) const;

 private:
  std::vector<AddedToken> tokens_;
  std::vector<std::vector<size_t>> by_first_byte_;  // token indices, longest first
};

// JavaScript's String.prototype.trimStart/trimEnd whitespace, on UTF-8.
std::string_view trim_start(std::string_view s);
std::string_view trim_end(std::string_view s);

}  // namespace shardtune::data
