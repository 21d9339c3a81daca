// The job's data on every rank: the tokenizer, the records tokenized once into a cached token file,
// and the datasets the trainer draws samples from.
#include "rank/job_data.h"

#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <numeric>
#include <random>

#include "common/error.h"
#include "common/log.h"
#include "common/file_io.h"
#include "common/job/schema.h"
#include "runtime/data/packed_rows.h"
#include "runtime/dist/agree.h"
#include "runtime/data/token_file.h"
#include "runtime/data/records.h"
#include "runtime/data/sft_examples.h"
#include "runtime/data/tokenizer.h"
#include "runtime/train/learned_only.h"
#include "runtime/train/packed_dataset.h"
#include "runtime/train/padded_dataset.h"
#include "common/subprocess.h"

namespace shardtune::rank_program {
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

// What a token file was made from: the data files (path, size, modification time), the tokenizer
// file, the prompt format, the special tokens and the validation split. Any change makes another
// file.
std::string file_stamp(const std::string& path) {
  namespace fs = std::filesystem;
  if (path.empty()) return "none";
  std::error_code ec;
  const auto size = fs::file_size(path, ec);
  const auto mtime = fs::last_write_time(path, ec).time_since_epoch().count();
  return fmt::format("{} size={} mtime={}", fs::absolute(path).string(), size, mtime);
}

std::string cache_key(const job::Job& job, const std::string& tokenizer, const data::ExampleOptions& options) {
  const std::string tokenizer_bytes = common::read_file(tokenizer, ErrorKind::kConfig, "the tokenizer");
  return fmt::format("data={}; val_file={}; tokenizer={:016x}; format={} prompt_field={} response_field={} "
                     "template={:016x}; bos={} eos={} max_tokens={}; val_fraction={} seed={}",
                     file_stamp(job.data.train_file), file_stamp(job.data.val_file), data::fingerprint(tokenizer_bytes),
                     job::enum_name(job.data.format), job.data.prompt_field, job.data.response_field,
                     data::fingerprint(job.data.prompt_template), options.bos, options.eos, options.max_tokens,
                     job.data.val_fraction, job.train.seed);
}

// One token file: next to the data file, or under the output directory when that folder cannot
// be written.
struct TokenCache {
  std::string what, key;
  std::vector<std::string> paths;

  TokenCache(const job::Job& job, const std::string& data_file, const std::string& key_, const char* what_)
      : what(what_), key(key_) {
    namespace fs = std::filesystem;
    const std::string name = fmt::format(".{}.{}.{:016x}.tokens", fs::path(data_file).filename().string(), what,
                                         data::fingerprint(key));
    paths = {(fs::path(data_file).parent_path() / name).string(), job.job.output_dir + "/token-cache/" + name};
  }

  // A damaged file is reported and then made again, like a missing one. Its name follows from the
  // data, so whoever can write the data's folder could put one there: only a file of this user
  // that nobody else may write is trusted.
  std::shared_ptr<const data::TokenFile> open(int64_t vocab_size) const {
    for (const std::string& p : paths) {
      struct stat st {};
      if (::stat(p.c_str(), &st) == 0 && (st.st_uid != ::geteuid() || (st.st_mode & (S_IWGRP | S_IWOTH)) != 0)) {
        spdlog::warn("ignoring the token file {}: it belongs to user {} or others may write it, so its tokens cannot "
                     "be trusted",
                     p, st.st_uid);
        continue;
      }
      try {
        if (auto f = data::TokenFile::open(p, key, vocab_size)) return f;
      } catch (const common::Error& e) {
        spdlog::warn("{}: tokenizing again", e.what());
      }
    }
    return nullptr;
  }

  void write(const std::vector<data::Example>& examples) const {
    for (const std::string& p : paths) {
      try {
        std::filesystem::create_directories(std::filesystem::path(p).parent_path());
        data::TokenFile::write(p, key, examples);
        return;
      } catch (const std::exception& e) {
        spdlog::warn("cannot cache the {} tokens at {}: {}", what, p, e.what());
      }
    }
    common::raise(ErrorKind::kIo, fmt::format("cannot write the tokenized {} data anywhere ({} or {})", what, paths[0],
                                              paths[1]));
  }
};

std::vector<data::Example> tokenize(const std::vector<data::Record>& records, const data::PromptFormat& format,
                                    const data::Tokenizer& tokenizer, const data::ExampleOptions& options,
                                    const std::string& what) {
  common::Progress progress(common::logged_progress("tokenizing the " + what + " data",
                                                    static_cast<int64_t>(records.size()), common::ProgressUnit::kCount,
                                                    "examples"));
  std::vector<data::Example> examples;
  examples.reserve(records.size());
  std::vector<std::string> cut;  // examples truncation left without a learned token
  for (const data::Record& r : records) {
    examples.push_back(data::make_example(tokenizer, format.prompt(r), r.fields.at(format.response_field), options));
    const std::vector<int32_t>& labels = examples.back().labels;
    if (std::all_of(labels.begin() + std::min<size_t>(1, labels.size()), labels.end(),
                    [](int32_t l) { return l == data::kIgnoreLabel; }))
      cut.push_back(r.where);
    progress.add(1);
  }
  progress.finish("tokenized the " + what + " data");
  if (!cut.empty())
    spdlog::warn("{} of {} {} examples keep no learned token once cut to context_length = {} (their prompts fill it): "
                 "they are left out: {}{}",
                 cut.size(), records.size(), what, options.max_tokens,
                 fmt::join(cut.begin(), cut.begin() + static_cast<std::ptrdiff_t>(std::min<size_t>(cut.size(), 10)), ", "),
                 cut.size() > 10 ? fmt::format(" and {} more", cut.size() - 10) : "");
  return examples;
}

// Reads, splits and tokenizes the records; writes the token files.
void build_token_files(const job::Job& job, const data::Tokenizer& tokenizer, const data::ExampleOptions& options,
                       const TokenCache& train_cache, const TokenCache* val_cache) {
  const data::PromptFormat format = data::prompt_format(job.data);
  std::vector<data::Record> train_records = read(job, format, job.data.train_file).records;
  std::vector<data::Record> val_records;
  if (!job.data.val_file.empty()) {
    val_records = read(job, format, job.data.val_file).records;
  } else if (job.data.val_fraction > 0 && train_records.size() >= 2) {
    // A seeded split of the records: the same at every world size.
    std::vector<size_t> order(train_records.size());
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), std::mt19937_64(static_cast<uint64_t>(job.train.seed)));
    const size_t n_val =
        std::max<size_t>(1, static_cast<size_t>(job.data.val_fraction * static_cast<double>(order.size())));
    std::vector<bool> is_val(order.size(), false);
    for (size_t i = 0; i < n_val; ++i) is_val[order[i]] = true;
    std::vector<data::Record> kept;
    for (size_t i = 0; i < train_records.size(); ++i)
      (is_val[i] ? val_records : kept).push_back(std::move(train_records[i]));
    train_records = std::move(kept);
  }
  train_cache.write(tokenize(train_records, format, tokenizer, options, "training"));
  if (val_cache != nullptr) val_cache->write(tokenize(val_records, format, tokenizer, options, "validation"));
}

std::unique_ptr<train::Dataset> batched(std::shared_ptr<const data::TokenFile> tokens, const job::Job& job,
                                        const data::ExampleOptions& options, const char* what, bool cached) {
  int64_t learned = 0;
  for (const int32_t l : tokens->labels()) learned += l != data::kIgnoreLabel;
  const int64_t pad = options.eos >= 0 ? options.eos : 0;
  const char* from_cache = cached ? " (tokens cached by an earlier run)" : "";
  if (job.train.batching_strategy == job::BatchingStrategy::kPadding) {
    auto examples = std::make_unique<train::LearnedOnly>(std::make_unique<train::PaddedDataset>(tokens, pad));
    spdlog::info("{} data: {} examples, {} tokens ({} learned, the rest prompt), at most {} per example, batched by "
                 "length and padded{}{}",
                 what, tokens->num_examples(), tokens->num_tokens(), learned, job.train.context_length,
                 examples->left_out() > 0
                     ? fmt::format("; {} example(s) left out, truncation left them no learned token", examples->left_out())
                     : "",
                 from_cache);
    return examples;
  }
  data::PackedRowView view(tokens, job.train.context_length, static_cast<int32_t>(pad));
  const int64_t all_rows = view.rows();
  auto rows = std::make_unique<train::LearnedOnly>(std::make_unique<train::PackedDataset>(std::move(view)));
  spdlog::info("{} data: {} examples, {} tokens ({} learned, the rest prompt), packed into {} rows of {}{}{}", what,
               tokens->num_examples(), tokens->num_tokens(), learned, all_rows, job.train.context_length,
               rows->left_out() > 0
                   ? fmt::format("; {} row(s) left out, they hold only prompt tokens", rows->left_out())
                   : "",
               from_cache);
  return rows;
}

}  // namespace

std::string tokenizer_path(const job::Job& job) {
  if (job.data.format == job::DataFormat::kSynthetic) return "";
  if (!job.data.tokenizer.empty()) return job.data.tokenizer;
  if (job.model.path.empty()) return "";
  const std::string json = job.model.path + "/tokenizer.json", model = job.model.path + "/tokenizer.model";
  return !std::filesystem::exists(json) && std::filesystem::exists(model) ? model : json;
}

std::string prepare_tokenizer(const job::Job& job, MPI_Comm world, const std::string& tool) {
  const std::string path = tokenizer_path(job);
  if (path.size() < 6 || path.compare(path.size() - 6, 6, ".model") != 0) return path;
  return dist::decide_on_root(world, [&] {
    const std::string converted = job.job.output_dir + "/tokenizer/tokenizer.json";
    std::filesystem::create_directories(job.job.output_dir + "/tokenizer");
    const common::CommandResult r = common::run_command({tool, path, "--write-json", converted});
    ST_CHECK(r.exit_code == 0, ErrorKind::kConfig, "cannot convert {} to tokenizer.json: {}", path, r.err);
    spdlog::info("converted the SentencePiece model {} to {}", path, converted);
    return converted;
  });
}

JobData load_job_data(const job::Job& job, const model::LlamaConfig& config, const std::string& tok_path,
                      const DataContext& context) {
  const int world_size = context.world_size;
  JobData out;
  const job::TrainSection& t = job.train;
  if (job.data.format == job::DataFormat::kSynthetic) {
    out.train = std::make_unique<train::SyntheticCopyDataset>(1 << 16, t.context_length, config.vocab_size,
                                                              static_cast<uint64_t>(t.seed));
    out.val = std::make_unique<train::SyntheticCopyDataset>(t.val_batch_size * world_size * 8, t.context_length,
                                                            config.vocab_size, static_cast<uint64_t>(t.seed) + 1);
    return out;
  }
  ST_CHECK(!tok_path.empty(), ErrorKind::kConfig, "[data] format \"{}\" needs a tokenizer: set [data] tokenizer",
           job::enum_name(job.data.format));
  const data::Tokenizer tokenizer = data::Tokenizer::from_file(tok_path);
  ST_CHECK(tokenizer.vocab_size() <= config.vocab_size, ErrorKind::kConfig,
           "{} has {} tokens but the model's vocabulary has {}: a tokenizer of another model?", tok_path,
           tokenizer.vocab_size(), config.vocab_size);
  data::ExampleOptions options;
  options.bos = tokenizer.bos_id().value_or(static_cast<int32_t>(config.bos_token_id));
  options.eos = tokenizer.eos_id().value_or(config.eos_token_ids.empty() ? -1 : static_cast<int32_t>(config.eos_token_ids[0]));
  const bool padding = t.batching_strategy == job::BatchingStrategy::kPadding;
  if (padding || job.data.long_examples == job::LongExamples::kTruncate) options.max_tokens = t.context_length;

  const std::string key = cache_key(job, tok_path, options);
  const TokenCache train_cache(job, job.data.train_file, key, "training");
  const bool want_val = !job.data.val_file.empty() || job.data.val_fraction > 0;
  const TokenCache val_cache(job, job.data.val_file.empty() ? job.data.train_file : job.data.val_file, key, "validation");
  std::shared_ptr<const data::TokenFile> train_tokens = train_cache.open(config.vocab_size);
  std::shared_ptr<const data::TokenFile> val_tokens = want_val ? val_cache.open(config.vocab_size) : nullptr;
  // Collective: another job may be writing the same token files right now, so ranks could see
  // them differently; all tokenize-or-map decisions must be the same.
  const bool cached = context.all_agree(train_tokens != nullptr && (!want_val || val_tokens != nullptr));
  if (!cached) {
    // Rank 0 reads and tokenizes; every rank then maps the token files it wrote.
    if (context.rank == 0) build_token_files(job, tokenizer, options, train_cache, want_val ? &val_cache : nullptr);
    context.barrier();
    train_tokens = train_cache.open(config.vocab_size);
    val_tokens = want_val ? val_cache.open(config.vocab_size) : nullptr;
    ST_CHECK(train_tokens != nullptr && (!want_val || val_tokens != nullptr), ErrorKind::kIo,
             "rank {} cannot read the token files rank 0 wrote (under {} or {})", context.rank,
             std::filesystem::path(train_cache.paths[0]).parent_path().string(), job.job.output_dir + "/token-cache");
  }
  out.train = batched(train_tokens, job, options, "training", cached);
  ST_CHECK(out.train->size() > 0, ErrorKind::kConfig,
           "no training example of {} keeps a learned token: cut to [train] context_length = {} tokens, every "
           "response is lost behind its prompt. HINT: raise [train] context_length, or use batching_strategy = "
           "\"packing\" with [data] long_examples = \"split\"",
           job.data.train_file, t.context_length);
  if (val_tokens != nullptr && val_tokens->num_examples() > 0)
    out.val = batched(val_tokens, job, options, "validation", cached);

  const int64_t global_batch = t.batch_size_training * world_size * t.gradient_accumulation_steps;
  ST_CHECK(out.train->size() >= global_batch, ErrorKind::kConfig,
           "{} gives {} training samples ({}), fewer than one global batch of {} ({} per rank x {} ranks x {} "
           "accumulation). HINT: more data, or a smaller batch_size_training or context_length",
           job.data.train_file, out.train->size(),
           t.batching_strategy == job::BatchingStrategy::kPadding ? "one per example"
                                                                  : fmt::format("rows of {} tokens", t.context_length),
           global_batch, t.batch_size_training, world_size, t.gradient_accumulation_steps);
  return out;
}

}  // namespace shardtune::rank_program
