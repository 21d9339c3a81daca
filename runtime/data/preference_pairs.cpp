// Preference pairs: prompts, answers and the truncation rule.
#include "runtime/data/preference_pairs.h"

#include <algorithm>

namespace shardtune::data {

int64_t prompt_length(const Example& e) {
  const auto first = std::find_if(e.labels.begin(), e.labels.end(), [](int32_t l) { return l != kIgnoreLabel; });
  return first - e.labels.begin();
}

namespace {

// Keeps `keep` prompt tokens (the first when it is BOS, then the prompt's last ones) and at most
// `answer` answer tokens.
void cut(Example& e, int64_t keep, int64_t answer, int32_t bos) {
  const int64_t p = prompt_length(e), n = static_cast<int64_t>(e.ids.size());
  const int64_t a = std::min(answer, n - p);
  std::vector<int32_t> ids, labels;
  const bool lead = bos >= 0 && p > 0 && e.ids[0] == bos && keep > 0;
  if (lead) {
    ids.push_back(e.ids[0]);
    labels.push_back(e.labels[0]);
  }
  const int64_t tail = keep - (lead ? 1 : 0);
  for (int64_t i = p - tail; i < p + a; ++i) {
    ids.push_back(e.ids[static_cast<size_t>(i)]);
    labels.push_back(e.labels[static_cast<size_t>(i)]);
  }
  e.ids = std::move(ids);
  e.labels = std::move(labels);
}

}  // namespace

bool truncate_pair(Example& chosen, Example& rejected, int64_t max_tokens, int32_t bos) {
  const int64_t longest = static_cast<int64_t>(std::max(chosen.ids.size(), rejected.ids.size()));
  if (max_tokens <= 0 || longest <= max_tokens) return false;
  const int64_t p = std::max(prompt_length(chosen), prompt_length(rejected));
  const int64_t answers = std::max(static_cast<int64_t>(chosen.ids.size()) - prompt_length(chosen),
                                   static_cast<int64_t>(rejected.ids.size()) - prompt_length(rejected));
  // The prompt gives way first, down to half the context (or its own length when shorter).
  const int64_t keep = std::min(p, std::max(max_tokens - answers, std::min(p, max_tokens / 2)));
  for (Example* e : {&chosen, &rejected}) cut(*e, std::min(keep, prompt_length(*e)), max_tokens - keep, bos);
  return true;
}

std::vector<ChatPiece> learn_last_turn(std::vector<ChatPiece> pieces) {
  auto last = std::find_if(pieces.rbegin(), pieces.rend(), [](const ChatPiece& p) { return p.learned; });
  auto first = std::find_if(last, pieces.rend(), [](const ChatPiece& p) { return !p.learned; });
  for (auto it = first; it != pieces.rend(); ++it) it->learned = false;
  return pieces;
}

}  // namespace shardtune::data
