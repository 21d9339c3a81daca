// Conversations rendered in a Llama model's own chat format, with its special tokens, into
// training examples whose loss falls on the assistant's turns: the same text, and so the same ids,
// as the model's Jinja chat_template gives under transformers' apply_chat_template.
//
// Formats (docs/data.md has the rendered text of each):
//  - llama3:   Llama 3 Instruct. <|begin_of_text|>, then for each turn a header
//              (<|start_header_id|>role<|end_header_id|>\n\n), its trimmed content and <|eot_id|>.
//  - llama3.1: Llama 3.1 / 3.3 Instruct: llama3 with a system turn always first, which opens with
//              "Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n" (the template's
//              default date_string, which transformers leaves as it is) before the system prompt.
//  - llama2:   Llama 2 chat: <s>[INST] user [/INST] assistant </s> per exchange, the system prompt
//              in <<SYS>> within the first user turn.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/job/job.h"
#include "runtime/data/records.h"
#include "runtime/data/sft_examples.h"
#include "runtime/data/tokenizer.h"

namespace shardtune::data {

enum class ChatStyle { kLlama3, kLlama31, kLlama2 };

std::string_view chat_style_name(ChatStyle style);

struct ChatChoice {
  ChatStyle style;
  std::string how;  // for the log: the key that forced it, or the template it was recognised from
};

// The chat format of [data] chat_format: forced, or (auto) recognised from the chat template of
// the tokenizer's folder (tokenizer_config.json's "chat_template", or chat_template.jinja). Throws
// common::Error(kConfig) naming [data] chat_format when auto finds no template, or one it does not
// know: a template is recognised only by its exact text, never approximated.
ChatChoice choose_chat_style(job::ChatFormat setting, const std::string& tokenizer_path);

// The style a chat template's exact text is, if shardtune knows it.
std::optional<ChatStyle> known_chat_template(std::string_view template_text);

// A piece of rendered text: a special token, or text between special tokens; `learned` when its
// tokens carry a loss.
struct ChatPiece {
  std::string text;
  bool special = false;
  bool learned = false;
};

struct ChatOptions {
  ChatStyle style = ChatStyle::kLlama3;
  bool train_on_all = false;        // [data] train_on = "all": every token learned
  bool generation_prompt = false;   // end with the assistant's header (or [/INST]), for generation
  std::string bos, eos;             // the tokenizer's BOS and EOS tokens, as text (llama2 uses both)
};

// The options of a style for this tokenizer: its BOS (and, for llama2, EOS) token text. Throws
// common::Error(kConfig) naming `tokenizer_path` when it has no such token.
ChatOptions chat_options(ChatStyle style, const Tokenizer& tokenizer, const std::string& tokenizer_path);

// Pure: the conversation as the chat template renders it. The assistant's content and the token
// that ends its turn (<|eot_id|> or </s>) are learned; with llama2, so is the space before and
// after the content that the template puts there.
std::vector<ChatPiece> render_chat(const std::vector<Turn>& turns, const ChatOptions& options);

// The ids of the rendered text, exactly as the tokenizer encodes the whole of it, and a label per
// id: the id itself where the token starts in a learned piece, kIgnoreLabel elsewhere. Throws
// common::Error(kConfig) naming `where` when a special token of the format is not in the
// tokenizer. max_tokens > 0 truncates.
Example chat_example(const Tokenizer& tokenizer, const std::vector<ChatPiece>& pieces, int64_t max_tokens,
                     const std::string& where);

// A Jinja chat template that renders a conversation of system, user and assistant turns exactly as
// render_chat does in `style` (with bos_token, eos_token and add_generation_prompt as
// transformers passes them): what an export embeds when the model was trained in a format its
// tokenizer folder's template is not.
std::string chat_template_text(ChatStyle style);

// Pure: `text` without the leading and trailing whitespace Python's str.strip() (and so Jinja's
// trim filter) removes: ASCII whitespace, U+001C..U+001F, U+0085, U+00A0 and Unicode's spaces.
std::string_view python_strip(std::string_view text);

}  // namespace shardtune::data
