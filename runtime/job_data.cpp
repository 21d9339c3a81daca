#include "runtime/job_data.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <filesystem>
#include <numeric>
#include <random>

#include "common/error.h"
#include "common/job/schema.h"
#include "runtime/data/packing.h"
#include "runtime/data/records.h"
#include "runtime/data/sft_examples.h"
#include "runtime/data/tokenizer.h"
#include "runtime/train/packed_dataset.h"

namespace shardtune::runtime {
namespace {

using common::ErrorKind;

data::RecordFile read(const job::Job& job, const data::PromptFormat& format, const std::string& path) {
  data::RecordFile f =
      data::read_records(path, format.required, format.may_be_empty, job.data.on_bad_record == job::BadRecordPolicy::kSkip);
  if (f.skipped > 0) {
    spdlog::warn("{}: skipped {} bad record(s) of {}; first: {}", path, f.skipped, f.skipped + static_cast<int64_t>(f.records.size()),
                 f.skip_reasons.front());
  }
  ST_CHECK(!f.records.empty(), ErrorKind::kConfig, "{}: no usable records", path);
  return f;
}

std::unique_ptr<train::Dataset> packed(const std::vector<data::Record>& records, const data::PromptFormat& format,
                                       const data::Tokenizer& tokenizer, const job::Job& job,
                                       const model::LlamaConfig& config, const char* what) {
  data::ExampleOptions options;
  options.bos = tokenizer.bos_id().value_or(static_cast<int32_t>(config.bos_token_id));
  options.eos = tokenizer.eos_id().value_or(config.eos_token_ids.empty() ? -1 : static_cast<int32_t>(config.eos_token_ids[0]));
  std::vector<data::Example> examples;
  examples.reserve(records.size());
  int64_t tokens = 0, learned = 0;
  for (const data::Record& r : records) {
    examples.push_back(data::make_example(tokenizer, format.prompt(r), r.fields.at(format.response_field), options));
    tokens += static_cast<int64_t>(examples.back().ids.size());
    learned += std::count_if(examples.back().labels.begin(), examples.back().labels.end(),
                             [](int32_t l) { return l != data::kIgnoreLabel; });
  }
  data::PackedRows rows = data::pack(examples, job.train.context_length, options.eos >= 0 ? options.eos : 0);
  spdlog::info("{} data: {} examples, {} tokens ({} learned, the rest prompt), packed into {} rows of {}", what,
               examples.size(), tokens, learned, rows.rows(), job.train.context_length);
  return std::make_unique<train::PackedDataset>(std::move(rows));
}

}  // namespace

std::string tokenizer_path(const job::Job& job) {
  if (job.data.format == job::DataFormat::kSynthetic) return "";
  if (!job.data.tokenizer.empty()) return job.data.tokenizer;
  return job.model.path.empty() ? "" : job.model.path + "/tokenizer.json";
}

JobData load_job_data(const job::Job& job, const model::LlamaConfig& config, int world_size) {
  JobData out;
  const job::TrainSection& t = job.train;
  if (job.data.format == job::DataFormat::kSynthetic) {
    out.train = std::make_unique<train::SyntheticCopyDataset>(1 << 16, t.context_length, config.vocab_size,
                                                              static_cast<uint64_t>(t.seed));
    out.val = std::make_unique<train::SyntheticCopyDataset>(t.val_batch_size * world_size * 8, t.context_length,
                                                            config.vocab_size, static_cast<uint64_t>(t.seed) + 1);
    return out;
  }
  const std::string tok_path = tokenizer_path(job);
  ST_CHECK(!tok_path.empty(), ErrorKind::kConfig, "[data] format \"{}\" needs a tokenizer: set [data] tokenizer",
           job::enum_name(job.data.format));
  const data::Tokenizer tokenizer = data::Tokenizer::from_file(tok_path);
  ST_CHECK(tokenizer.vocab_size() <= config.vocab_size, ErrorKind::kConfig,
           "{} has {} tokens but the model's vocabulary has {}: a tokenizer of another model?", tok_path,
           tokenizer.vocab_size(), config.vocab_size);
  const data::PromptFormat format = data::prompt_format(job.data);

  std::vector<data::Record> train_records = read(job, format, job.data.train_file).records;
  std::vector<data::Record> val_records;
  if (!job.data.val_file.empty()) {
    val_records = read(job, format, job.data.val_file).records;
  } else if (job.data.val_fraction > 0 && train_records.size() >= 2) {
    // A seeded split of the records: the same on every rank and at every world size.
    std::vector<size_t> order(train_records.size());
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), std::mt19937_64(static_cast<uint64_t>(t.seed)));
    const size_t n_val = std::max<size_t>(1, static_cast<size_t>(job.data.val_fraction * static_cast<double>(order.size())));
    std::vector<bool> is_val(order.size(), false);
    for (size_t i = 0; i < n_val; ++i) is_val[order[i]] = true;
    std::vector<data::Record> kept;
    for (size_t i = 0; i < train_records.size(); ++i) (is_val[i] ? val_records : kept).push_back(std::move(train_records[i]));
    train_records = std::move(kept);
  }
  out.train = packed(train_records, format, tokenizer, job, config, "training");
  if (!val_records.empty()) out.val = packed(val_records, format, tokenizer, job, config, "validation");

  const int64_t global_batch = t.batch_size_training * world_size * t.gradient_accumulation_steps;
  ST_CHECK(out.train->size() >= global_batch, ErrorKind::kConfig,
           "{} packs into {} rows of {} tokens, fewer than one global batch of {} ({} per rank x {} ranks x {} "
           "accumulation). HINT: more data, a smaller batch_size_training or context_length",
           job.data.train_file, out.train->size(), t.context_length, global_batch, t.batch_size_training, world_size,
           t.gradient_accumulation_steps);
  return out;
}

}  // namespace shardtune::runtime
