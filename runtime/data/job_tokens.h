// The job's token files: what each is made from (its key: every input that changes its tokens),
// made once by rank 0 (read, held out, tokenized) and mapped by every rank, by this job and by any
// later one with the same inputs.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "common/job/job.h"
#include "runtime/data/job_data.h"
#include "runtime/data/records.h"
#include "runtime/data/sft_examples.h"
#include "runtime/data/token_file.h"
#include "runtime/data/tokenizer.h"

namespace shardtune::data {

// A seeded split of the records, the same at every world size: `fraction` of them (at least one)
// moved out of `records` and returned, when there are two or more; none otherwise.
std::vector<Record> hold_out(std::vector<Record>& records, double fraction, int64_t seed);

// The examples' special tokens, the tokenizer's bos and eos (else the model's), and their
// truncation: to context_length when batched by padding or with [data] long_examples = "truncate".
ExampleOptions example_options(const job::Job& job, const Tokenizer& tokenizer, const ModelTokens& model);

// Whether the job validates on records held out of its training file (no val_file).
bool splits_training_file(const job::Job& job);

struct TokenFiles {
  std::shared_ptr<const TokenFile> train, val;  // val: null when the job does not validate
  bool cached = false;                          // both were there already, made by an earlier run
};

// The keys and token caches of one job's data with one tokenizer.
class JobTokens {
 public:
  // `tokenizer_file`: the tokenizer.json `tokenizer` was read from; `options`: the examples' bos,
  // eos and truncation (example_options). `tokenizer` must outlive this object; the job is copied.
  JobTokens(const job::Job& job, const Tokenizer& tokenizer, const std::string& tokenizer_file,
            const ExampleOptions& options);
  ~JobTokens();

  // What the training and validation token files are made from ("name=value; ..."): the
  // tokenizer's bytes, the prompt or chat format, bos/eos/truncation, the data file's identity,
  // the split. Equal keys, equal tokens.
  const std::string& training_key() const;
  const std::string& validation_key() const;
  // How the records are rendered, for the log ("" for prompt formats).
  std::string chat_description() const;

  // The token files: mapped when they exist for these keys, else made by rank 0 and then mapped
  // by every rank. Collective over the context. Removes token files of other keys that no job has
  // used for a day, beyond the three most recent.
  TokenFiles open_or_make(int64_t vocab_size, const DataContext& context) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The items of a key ("name=value; name=value"), by name.
std::map<std::string, std::string> key_items(const std::string& key);

}  // namespace shardtune::data
