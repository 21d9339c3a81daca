#include "runtime/data/sft_examples.h"

#include <fmt/format.h>

#include "common/error.h"
#include "common/job/schema.h"

namespace shardtune::data {

using common::ErrorKind;

std::string fill_template(const std::string& templ, const Record& record) {
  std::string out;
  for (size_t i = 0; i < templ.size(); ++i) {
    const char c = templ[i];
    if ((c == '{' || c == '}') && i + 1 < templ.size() && templ[i + 1] == c) {
      out += c;
      ++i;
    } else if (c == '{') {
      const size_t close = templ.find('}', i);
      ST_CHECK(close != std::string::npos, ErrorKind::kConfig, "prompt template \"{}\": '{{' at {} is never closed",
               templ, i);
      const std::string name = templ.substr(i + 1, close - i - 1);
      const auto it = record.fields.find(name);
      ST_CHECK(it != record.fields.end(), ErrorKind::kConfig, "{}: the prompt template uses {{{}}}, which the record lacks",
               record.where, name);
      out += it->second;
      i = close;
    } else {
      ST_CHECK(c != '}', ErrorKind::kConfig, "prompt template \"{}\": a lone '}}' at {} (write '}}}}')", templ, i);
      out += c;
    }
  }
  return out;
}

PromptFormat prompt_format(const job::DataSection& data) {
  PromptFormat f;
  const std::string custom = data.prompt_template;
  auto templated = [custom](std::string fallback) {
    const std::string t = custom.empty() ? std::move(fallback) : custom;
    return [t](const Record& r) { return fill_template(t, r); };
  };
  switch (data.format) {
    case job::DataFormat::kAlpaca:
      f.required = {"instruction", "input", "output"};
      f.may_be_empty = {"input"};
      f.response_field = "output";
      if (!custom.empty()) {
        f.prompt = templated(custom);
      } else {
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
      }
      break;
    case job::DataFormat::kSamsum:
      f.required = {"dialogue", "summary"};
      f.response_field = "summary";
      f.prompt = templated("Summarize this dialog:\n{dialogue}\n---\nSummary:\n");
      break;
    case job::DataFormat::kGrammar:
      f.required = {"input", "target"};
      f.response_field = "target";
      f.prompt = templated("Correct this to standard English: {input}\n---\nCorrected: ");
      break;
    case job::DataFormat::kJsonl:
      f.required = {data.prompt_field, data.response_field};
      f.response_field = data.response_field;
      f.prompt = templated("{" + data.prompt_field + "}");
      break;
    case job::DataFormat::kSynthetic:
      common::raise(ErrorKind::kInternal, "the synthetic format has no records");
  }
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
