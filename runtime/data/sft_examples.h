// From records to supervised fine-tuning examples: the prompt of each dataset format (alpaca,
// samsum, grammar, or a job's own template), tokenized with BOS in front; the response and EOS
// after it. Prompt tokens get label -100 (no loss); response tokens and EOS are learned.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "common/job/job.h"
#include "runtime/data/records.h"
#include "runtime/data/tokenizer.h"

namespace shardtune::data {

constexpr int32_t kIgnoreLabel = -100;

struct Example {
  std::vector<int32_t> ids;
  std::vector<int32_t> labels;  // kIgnoreLabel on prompt tokens
};

struct PromptFormat {
  std::vector<std::string> required;      // fields every record must have
  std::vector<std::string> may_be_empty;  // of those, the ones that may be ""
  std::string response_field;
  std::function<std::string(const Record&)> prompt;
};

// The format of [data]: its fields and prompt. A prompt_template overrides the format's own: a record
// then needs the template's fields and the response field (prompt_field is not used).
// Throws common::Error(kConfig) when the template names an unknown placeholder syntax.
PromptFormat prompt_format(const job::DataSection& data);

// Pure: "{instruction}\n{input}" with each {name} replaced by the record's field; "{{" and "}}"
// are literal braces. Throws common::Error(kConfig) naming the record for a missing field.
std::string fill_template(const std::string& templ, const Record& record);

struct ExampleOptions {
  int32_t bos = -1;  // -1: none
  int32_t eos = -1;
  int64_t max_tokens = 0;  // > 0: truncate longer examples to this many tokens
};

Example make_example(const Tokenizer& tokenizer, const std::string& prompt, const std::string& response,
                     const ExampleOptions& options);

}  // namespace shardtune::data
