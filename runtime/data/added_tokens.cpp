#include "runtime/data/added_tokens.h"

#include <algorithm>

#include "runtime/data/utf8.h"

namespace shardtune::data {
namespace {

bool is_js_space(char32_t c) {
  return (c >= 0x9 && c <= 0xD) || c == 0x20 || c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) ||
         c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000 || c == 0xFEFF;
}

}  // namespace

std::string_view trim_start(std::string_view s) {
  size_t pos = 0;
  while (pos < s.size()) {
    size_t next = pos;
    if (!is_js_space(next_code_point(s, next))) break;
    pos = next;
  }
  return s.substr(pos);
}

std::string_view trim_end(std::string_view s) {
  size_t end = 0, pos = 0;
  while (pos < s.size()) {
    const char32_t c = next_code_point(s, pos);
    if (!is_js_space(c)) end = pos;
  }
  return s.substr(0, end);
}

AddedTokenSplitter::AddedTokenSplitter(std::vector<AddedToken> tokens)
    : tokens_(std::move(tokens)), by_first_byte_(256) {
  for (size_t i = 0; i < tokens_.size(); ++i)
    if (!tokens_[i].content.empty())
      by_first_byte_[static_cast<unsigned char>(tokens_[i].content[0])].push_back(i);
  for (auto& list : by_first_byte_)
    std::stable_sort(list.begin(), list.end(),
                     [&](size_t a, size_t b) { return tokens_[a].content.size() > tokens_[b].content.size(); });
}

std::vector<Section> AddedTokenSplitter::split(std::string_view text) const {
  std::vector<Section> out;
  size_t start = 0, i = 0;
  while (i < text.size()) {
    const AddedToken* found = nullptr;
    for (const size_t t : by_first_byte_[static_cast<unsigned char>(text[i])]) {
      if (text.substr(i, tokens_[t].content.size()) == tokens_[t].content) {
        found = &tokens_[t];
        break;
      }
    }
    if (found == nullptr) {
      ++i;
      continue;
    }
    if (i > start) out.push_back({text.substr(start, i - start)});
    out.push_back({text.substr(i, found->content.size()), found->id});
    i += found->content.size();
    start = i;
  }
  if (start < text.size()) out.push_back({text.substr(start)});
  // lstrip/rstrip trim the neighbouring plain sections.
  for (size_t k = 0; k < out.size(); ++k) {
    if (out[k].added_id < 0) continue;
    const auto it = std::find_if(tokens_.begin(), tokens_.end(), [&](const AddedToken& t) { return t.id == out[k].added_id; });
    if (it->lstrip && k > 0 && out[k - 1].added_id < 0) out[k - 1].text = trim_end(out[k - 1].text);
    if (it->rstrip && k + 1 < out.size() && out[k + 1].added_id < 0) out[k + 1].text = trim_start(out[k + 1].text);
  }
  return out;
}

}  // namespace shardtune::data
