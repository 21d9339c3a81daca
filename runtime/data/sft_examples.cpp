#include "runtime/data/sft_examples.h"

#include <fmt/format.h>

#include <algorithm>

#include "common/error.h"
#include "common/prompt_template.h"
#include "common/job/schema.h"

namespace shardtune::data {

using common::ErrorKind;

std::string fill_template(const std::string& templ, const Record& record) {
  const common::ParsedTemplate parsed = common::parse_prompt_template(templ);
  ST_CHECK(parsed.error.empty(), ErrorKind::kConfig, "prompt template \"{}\": {}", templ, parsed.error);
  std::string out;
  for (const common::TemplatePiece& piece : parsed.pieces) {
    if (!piece.field) {
      out += piece.text;
      continue;
    }
    const auto it = record.fields.find(piece.text);
    ST_CHECK(it != record.fields.end(), ErrorKind::kConfig, "{}: the prompt template uses {{{}}}, which the record lacks",
             record.where, piece.text);
    out += it->second;
  }
  return out;
}

namespace {

// A job's own template: the record needs the template's fields and the response; of those, only
// the ones the format lets be empty may be.
void use_template(PromptFormat& f, const std::string& templ) {
  const common::ParsedTemplate parsed = common::parse_prompt_template(templ);
  ST_CHECK(parsed.error.empty(), ErrorKind::kConfig, "[data] prompt_template \"{}\": {}", templ, parsed.error);
  std::vector<std::string> required = parsed.fields();
  if (std::find(required.begin(), required.end(), f.response_field) == required.end())
    required.push_back(f.response_field);
  std::vector<std::string> may_be_empty;
  for (const std::string& name : f.may_be_empty)
    if (std::find(required.begin(), required.end(), name) != required.end()) may_be_empty.push_back(name);
  f.required = std::move(required);
  f.may_be_empty = std::move(may_be_empty);
  f.prompt = [templ](const Record& r) { return fill_template(templ, r); };
}

}  // namespace

PromptFormat prompt_format(const job::DataSection& data) {
  PromptFormat f;
  switch (data.format) {
    case job::DataFormat::kAlpaca:
      f.required = {"instruction", "input", "output"};
      f.may_be_empty = {"input"};
      f.response_field = "output";
      f.prompt = [](const Record& r) {
        const std::string& input = r.fields.at("input");
        return input.empty()
                   ? fill_template("Below is an instruction that describes a task. Write a response that appropriately "
                                   "completes the request.\n\n### Instruction:\n{instruction}\n\n### Response:\n",
                                   r)
                   : fill_template("Below is an instruction that describes a task, paired with an input that provides "
                                   "further context. Write a response that appropriately completes the request.\n\n"
                                   "### Instruction:\n{instruction}\n\n### Input:\n{input}\n\n### Response:\n",
                                   r);
      };
      break;
    case job::DataFormat::kSamsum:
      f.required = {"dialogue", "summary"};
      f.response_field = "summary";
      f.prompt = [](const Record& r) { return fill_template("Summarize this dialog:\n{dialogue}\n---\nSummary:\n", r); };
      break;
    case job::DataFormat::kGrammar:
      f.required = {"input", "target"};
      f.response_field = "target";
      f.prompt = [](const Record& r) { return fill_template("Correct this to standard English: {input}\n---\nCorrected: ", r); };
      break;
    case job::DataFormat::kJsonl: {
      f.required = {data.prompt_field, data.response_field};
      f.response_field = data.response_field;
      const std::string templ = "{" + data.prompt_field + "}";
      f.prompt = [templ](const Record& r) { return fill_template(templ, r); };
      break;
    }
    case job::DataFormat::kPreference:  // pairs of text: the answers are "chosen" and "rejected"
      f.required = {"prompt", "chosen", "rejected"};
      f.response_field = "chosen";
      f.prompt = [](const Record& r) { return fill_template("{prompt}", r); };
      break;
    case job::DataFormat::kSynthetic:
      common::raise(ErrorKind::kInternal, "the synthetic format has no records");
    case job::DataFormat::kChat:
      common::raise(ErrorKind::kInternal, "the chat format has no prompt: conversations are rendered (data/chat.h)");
  }
  if (!data.prompt_template.empty()) use_template(f, data.prompt_template);
  if (data.format == job::DataFormat::kPreference &&
      std::find(f.required.begin(), f.required.end(), "rejected") == f.required.end())
    f.required.push_back("rejected");
  return f;
}

Example make_example(const Tokenizer& tokenizer, const std::string& prompt, const std::string& response,
                     const ExampleOptions& options) {
  Example e;
  if (options.bos >= 0) e.ids.push_back(options.bos);
  const std::vector<int32_t> p = tokenizer.encode(prompt);
  e.ids.insert(e.ids.end(), p.begin(), p.end());
  e.labels.assign(e.ids.size(), kIgnoreLabel);
  const std::vector<int32_t> r = tokenizer.encode(response);
  e.ids.insert(e.ids.end(), r.begin(), r.end());
  e.labels.insert(e.labels.end(), r.begin(), r.end());
  if (options.eos >= 0) {
    e.ids.push_back(options.eos);
    e.labels.push_back(options.eos);
  }
  if (options.max_tokens > 0 && static_cast<int64_t>(e.ids.size()) > options.max_tokens) {
    e.ids.resize(static_cast<size_t>(options.max_tokens));
    e.labels.resize(static_cast<size_t>(options.max_tokens));
  }
  return e;
}

}  // namespace shardtune::data
