// Preference pairs as examples: the chosen and the rejected answer to one prompt, each a sequence of
// the prompt's tokens then the answer's, the loss (here: the log-probability DPO compares) on the
// answer alone. A token file holds a pair as two consecutive examples, chosen first.
//
// Truncation, when a pair's longer sequence exceeds max_tokens: the prompt loses its earliest
// tokens first (a leading BOS stays), never below half of max_tokens (or its own length), so that
// both answers fit; answers that still do not fit lose their end. Both sequences keep the same
// prompt tokens. TRL cuts the same way: the prompt's start (keep_end), then the answers' ends.
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/data/chat.h"
#include "runtime/data/sft_examples.h"

namespace shardtune::data {

// The tokens before the first learned one: the prompt of a pair's example.
int64_t prompt_length(const Example& e);

// Pure: cuts the pair by the rule above; `bos` (-1: none) is kept when it starts a prompt. Returns
// whether anything was cut.
bool truncate_pair(Example& chosen, Example& rejected, int64_t max_tokens, int32_t bos);

// Pure: the pieces with only the last assistant turn learned (a conversational pair's answer; the
// earlier turns are its prompt).
std::vector<ChatPiece> learn_last_turn(std::vector<ChatPiece> pieces);

}  // namespace shardtune::data
