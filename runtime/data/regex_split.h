// Hugging Face's `Split` pre-tokenizer with a regex, on PCRE2 (UTF-8, Unicode properties, JIT).
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace shardtune::data {

class RegexSplitter {
 public:
  // `pattern` as written in tokenizer.json (Oniguruma syntax, which PCRE2 reads). `\s` and `\S`
  // are taken as Unicode White_Space, as Hugging Face's tokenizers do. Throws
  // common::Error(kConfig) with PCRE2's message and offset when it does not compile.
  explicit RegexSplitter(const std::string& pattern);
  ~RegexSplitter();
  RegexSplitter(RegexSplitter&&) noexcept;
  RegexSplitter& operator=(RegexSplitter&&) noexcept;

  // "Isolated": every match and every stretch between matches is a piece, in order. `text` must
  // be valid UTF-8. Thread-safe.
  void split(std::string_view text, std::vector<std::string_view>& pieces) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The pattern with `\s`/`\S` spelled as Unicode White_Space (PCRE2's own `\s` adds U+180E).
std::string with_unicode_white_space(const std::string& pattern);

}  // namespace shardtune::data
