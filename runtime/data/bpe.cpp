#include "runtime/data/bpe.h"

#include <fmt/format.h>

#include <algorithm>
#include <queue>

#include "common/error.h"
#include "runtime/data/tokenizer.h"

namespace shardtune::data {

using common::ErrorKind;

BpeModel::BpeModel(BpeConfig config)
    : vocab_(std::move(config.vocab)), byte_fallback_(config.byte_fallback), ignore_merges_(config.ignore_merges) {
  int32_t max_id = -1;
  for (const auto& [text, id] : vocab_) {
    ST_CHECK(id >= 0 && id <= kMaxTokenId, ErrorKind::kConfig, "vocabulary entry \"{}\" has the id {}, outside 0..{}",
             text, id, kMaxTokenId);
    max_id = std::max(max_id, id);
  }
  id_to_token_.assign(static_cast<size_t>(max_id + 1), std::string());
  for (const auto& [text, id] : vocab_) id_to_token_[static_cast<size_t>(id)] = text;
  merges_.reserve(config.merges.size());
  for (size_t rank = 0; rank < config.merges.size(); ++rank) {
    const auto& [a, b] = config.merges[rank];
    const auto ia = vocab_.find(a), ib = vocab_.find(b), ir = vocab_.find(a + b);
    ST_CHECK(ia != vocab_.end() && ib != vocab_.end() && ir != vocab_.end(), ErrorKind::kConfig,
             "merge {} (\"{}\" + \"{}\"): {} is not in the vocabulary", rank, a, b,
             ia == vocab_.end() ? a : ib == vocab_.end() ? b : a + b);
    merges_.emplace(pair_key(ia->second, ib->second), Merge{static_cast<int32_t>(rank), ir->second});  // first wins
  }
  if (config.unk_token) {
    const auto it = vocab_.find(*config.unk_token);
    ST_CHECK(it != vocab_.end(), ErrorKind::kConfig, "unk_token \"{}\" is not in the vocabulary", *config.unk_token);
    unk_ = it->second;
  }
  for (int b = 0; b < 256; ++b) {
    const auto it = vocab_.find(fmt::format("<0x{:02X}>", b));
    byte_tokens_[b] = it == vocab_.end() ? -1 : it->second;
  }
}

std::optional<int32_t> BpeModel::id(std::string_view token) const {
  const auto it = vocab_.find(std::string(token));
  return it == vocab_.end() ? std::nullopt : std::optional<int32_t>(it->second);
}

const std::string& BpeModel::token(int32_t id) const {
  static const std::string none;
  return id >= 0 && id < vocab_size() ? id_to_token_[static_cast<size_t>(id)] : none;
}

// Merges in place with a heap of candidate pairs ordered by (rank, position); entries that no
// longer describe adjacent symbols are skipped when popped. Merged symbols keep the left
// position, so "leftmost first" among equal ranks holds throughout.
void BpeModel::merge(std::vector<int32_t>& symbols) const {
  const int n = static_cast<int>(symbols.size());
  if (n < 2) return;
  std::vector<int> next(static_cast<size_t>(n)), prev(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    next[static_cast<size_t>(i)] = i + 1 < n ? i + 1 : -1;
    prev[static_cast<size_t>(i)] = i - 1;
  }
  struct Candidate {
    int32_t rank;
    int left;
    int32_t a, b;
    bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : left > o.left; }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> heap;
  auto push = [&](int left) {
    const int right = next[static_cast<size_t>(left)];
    if (right < 0) return;
    const int32_t a = symbols[static_cast<size_t>(left)], b = symbols[static_cast<size_t>(right)];
    if (a < 0 || b < 0) return;
    if (const auto it = merges_.find(pair_key(a, b)); it != merges_.end()) heap.push({it->second.rank, left, a, b});
  };
  for (int i = 0; i + 1 < n; ++i) push(i);
  while (!heap.empty()) {
    const Candidate c = heap.top();
    heap.pop();
    const int right = next[static_cast<size_t>(c.left)];
    if (symbols[static_cast<size_t>(c.left)] != c.a || right < 0 || symbols[static_cast<size_t>(right)] != c.b) continue;
    symbols[static_cast<size_t>(c.left)] = merges_.at(pair_key(c.a, c.b)).result;
    symbols[static_cast<size_t>(right)] = -2;  // removed
    next[static_cast<size_t>(c.left)] = next[static_cast<size_t>(right)];
    if (next[static_cast<size_t>(right)] >= 0) prev[static_cast<size_t>(next[static_cast<size_t>(right)])] = c.left;
    if (prev[static_cast<size_t>(c.left)] >= 0) push(prev[static_cast<size_t>(c.left)]);
    push(c.left);
  }
  size_t w = 0;
  for (int i = 0; i >= 0 && i < n; i = next[static_cast<size_t>(i)]) symbols[w++] = symbols[static_cast<size_t>(i)];
  symbols.resize(w);
}

void BpeModel::encode_word(std::string_view word, std::vector<int32_t> symbols,
                           const std::vector<std::string_view>& symbol_text, std::vector<int32_t>& out) const {
  if (ignore_merges_) {
    if (const auto it = vocab_.find(std::string(word)); it != vocab_.end()) {
      out.push_back(it->second);
      return;
    }
  }
  // Remember which unknown symbol each -1 was, for byte fallback after merging.
  std::vector<std::string_view> unknown;
  for (size_t i = 0; i < symbols.size(); ++i)
    if (symbols[i] < 0) {
      symbols[i] = -3 - static_cast<int32_t>(unknown.size());
      unknown.push_back(symbol_text[i]);
    }
  merge(symbols);
  for (const int32_t s : symbols) {
    if (s >= 0) {
      out.push_back(s);
      continue;
    }
    const std::string_view text = unknown[static_cast<size_t>(-3 - s)];
    bool all_bytes = byte_fallback_;
    for (const char c : text) all_bytes = all_bytes && byte_tokens_[static_cast<unsigned char>(c)] >= 0;
    if (all_bytes) {
      for (const char c : text) out.push_back(byte_tokens_[static_cast<unsigned char>(c)]);
    } else if (unk_ >= 0) {
      out.push_back(unk_);
    }
  }
}

}  // namespace shardtune::data
