// The job's data on every rank: the tokenizer, the records tokenized once into a cached token file,
// and the datasets the trainer draws samples from.
#include "rank/job_data.h"

#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <numeric>
#include <random>

#include "common/error.h"
#include "common/log.h"
#include "common/file_io.h"
#include "common/job/schema.h"
#include "runtime/data/chat.h"
#include "runtime/data/packed_rows.h"
#include "runtime/dist/agree.h"
#include "runtime/data/token_cache.h"
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

// What reading and tokenizing found, logged as it happens and kept in the token files' notes for
// the runs that map them instead.
class Findings {
 public:
  void warn(std::string line) {
    spdlog::warn("{}", line);
    lines_.push_back(std::move(line));
  }
  std::string notes() const { return fmt::format("{}", fmt::join(lines_, "\n")); }

 private:
  std::vector<std::string> lines_;
};

// How the job's records become examples: the format's prompt and response, or (chat) the
// conversation rendered in the model's chat format.
struct ExampleMaker {
  data::PromptFormat format;             // not chat
  std::optional<data::ChatOptions> chat;  // chat
  std::string chat_how;                   // where the chat format came from, for the log and the token key

  data::Example make(const data::Tokenizer& tokenizer, const data::Record& r, const data::ExampleOptions& options) const {
    if (chat) return data::chat_example(tokenizer, data::render_chat(r.turns, *chat), options.max_tokens, r.where);
    return data::make_example(tokenizer, format.prompt(r), r.fields.at(format.response_field), options);
  }
};

ExampleMaker example_maker(const job::Job& job, const data::Tokenizer& tokenizer, const std::string& tok_path) {
  ExampleMaker m;
  if (job.data.format != job::DataFormat::kChat) {
    m.format = data::prompt_format(job.data);
    return m;
  }
  // The template sits beside the tokenizer the job names (a tokenizer.model is converted elsewhere).
  const data::ChatChoice choice = data::choose_chat_style(job.data.chat_format, tokenizer_path(job));
  data::ChatOptions o = data::chat_options(choice.style, tokenizer, tok_path);
  o.train_on_all = job.data.train_on == job::TrainOn::kAll;
  m.chat = o;
  m.chat_how = fmt::format("{} ({})", data::chat_style_name(choice.style), choice.how);
  return m;
}

data::RecordFile read(const job::Job& job, const ExampleMaker& maker, const std::string& path, Findings& findings) {
  const bool skip = job.data.on_bad_record == job::BadRecordPolicy::kSkip;
  data::RecordFile f = maker.chat ? data::read_conversations(path, skip)
                                  : data::read_records(path, maker.format.required, maker.format.may_be_empty, skip);
  if (f.skipped > 0) {
    findings.warn(fmt::format("{}: skipped {} bad record(s) of {}; first: {}", path, f.skipped,
                              f.skipped + static_cast<int64_t>(f.records.size()), fmt::join(f.skip_reasons, "; ")));
  }
  ST_CHECK(!f.records.empty(), ErrorKind::kConfig, "{}: no usable records", path);
  return f;
}

// The tokens of the validation set: the val_file's, or a share of the training file's records
// (val_fraction), held out only when the job validates.
bool splits_training_file(const job::Job& job) {
  return job.train.run_validation && job.data.val_file.empty() && job.data.val_fraction > 0;
}
bool wants_validation(const job::Job& job) {
  return job.train.run_validation && (!job.data.val_file.empty() || job.data.val_fraction > 0);
}

// What a token file is made from: every input that changes its tokens or its counts. A change of
// any makes another file. kTokenRules is the version of the reading, prompting and tokenizing
// code itself.
constexpr int kTokenRules = 2;

std::string examples_key(const job::Job& job, const std::string& tokenizer, const data::ExampleOptions& options,
                         const ExampleMaker& maker) {
  const std::string tokenizer_bytes = common::read_file(tokenizer, ErrorKind::kConfig, "the tokenizer");
  const std::string chat = maker.chat ? fmt::format("; chat={} bos={} eos={} train_on={}", maker.chat_how,
                                                    maker.chat->bos, maker.chat->eos, job::enum_name(job.data.train_on))
                                      : std::string();
  return fmt::format("rules={}; tokenizer={:016x}; format={} prompt_field={} response_field={} template={:016x}; "
                     "bos={} eos={} max_tokens={}; on_bad_record={}{}",
                     kTokenRules, data::fingerprint(tokenizer_bytes), job::enum_name(job.data.format),
                     job.data.prompt_field, job.data.response_field, data::fingerprint(job.data.prompt_template),
                     options.bos, options.eos, options.max_tokens, job::enum_name(job.data.on_bad_record), chat);
}

std::string training_key(const job::Job& job, const std::string& examples) {
  return fmt::format("{}; data={}; split={}", examples, data::data_file_stamp(job.data.train_file),
                     splits_training_file(job)
                         ? fmt::format("val_fraction={} seed={}", job.data.val_fraction, job.train.seed)
                         : std::string("none"));
}

std::string validation_key(const job::Job& job, const std::string& examples) {
  if (!job.data.val_file.empty()) return fmt::format("{}; data={}", examples, data::data_file_stamp(job.data.val_file));
  return training_key(job, examples) + "; held out";
}

std::vector<data::Example> tokenize(const std::vector<data::Record>& records, const ExampleMaker& maker,
                                    const data::Tokenizer& tokenizer, const data::ExampleOptions& options,
                                    const std::string& what, Findings& findings) {
  common::Progress progress(common::logged_progress("tokenizing the " + what + " data",
                                                    static_cast<int64_t>(records.size()), common::ProgressUnit::kCount,
                                                    "examples"));
  std::vector<data::Example> examples;
  examples.reserve(records.size());
  std::vector<std::string> cut;  // examples truncation left without a learned token
  for (const data::Record& r : records) {
    examples.push_back(maker.make(tokenizer, r, options));
    const std::vector<int32_t>& labels = examples.back().labels;
    if (std::all_of(labels.begin() + std::min<size_t>(1, labels.size()), labels.end(),
                    [](int32_t l) { return l == data::kIgnoreLabel; }))
      cut.push_back(r.where);
    progress.add(1);
  }
  progress.finish("tokenized the " + what + " data");
  if (!cut.empty())
    findings.warn(fmt::format(
        "{} of {} {} examples keep no learned token once cut to context_length = {} (their prompts fill it): they are "
        "left out: {}{}",
        cut.size(), records.size(), what, options.max_tokens,
        fmt::join(cut.begin(), cut.begin() + static_cast<std::ptrdiff_t>(std::min<size_t>(cut.size(), 10)), ", "),
        cut.size() > 10 ? fmt::format(" and {} more", cut.size() - 10) : ""));
  return examples;
}

// A seeded split of the records, the same at every world size: val_fraction of them (at least
// one) held out for validation, when there are two or more.
std::vector<data::Record> hold_out(const job::Job& job, std::vector<data::Record>& records) {
  std::vector<data::Record> held;
  if (records.size() < 2) return held;
  std::vector<size_t> order(records.size());
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), std::mt19937_64(static_cast<uint64_t>(job.train.seed)));
  const size_t n_val = std::max<size_t>(1, static_cast<size_t>(job.data.val_fraction * static_cast<double>(order.size())));
  std::vector<bool> is_val(order.size(), false);
  for (size_t i = 0; i < n_val; ++i) is_val[order[i]] = true;
  std::vector<data::Record> kept;
  for (size_t i = 0; i < records.size(); ++i) (is_val[i] ? held : kept).push_back(std::move(records[i]));
  records = std::move(kept);
  return held;
}

// Reads, splits and tokenizes the records; writes the token files.
void build_token_files(const job::Job& job, const data::Tokenizer& tokenizer, const data::ExampleOptions& options,
                       const ExampleMaker& maker, const data::TokenCache& train_cache,
                       const data::TokenCache* val_cache) {
  Findings train_findings, val_findings;
  std::vector<data::Record> train_records = read(job, maker, job.data.train_file, train_findings).records;
  std::vector<data::Record> val_records;
  if (val_cache != nullptr && !job.data.val_file.empty()) {
    val_records = read(job, maker, job.data.val_file, val_findings).records;
  } else if (splits_training_file(job)) {
    val_records = hold_out(job, train_records);
  }
  train_cache.write(tokenize(train_records, maker, tokenizer, options, "training", train_findings),
                    train_findings.notes());
  if (val_cache != nullptr)
    val_cache->write(tokenize(val_records, maker, tokenizer, options, "validation", val_findings), val_findings.notes());
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

namespace {

// The token files of the job: mapped when an earlier run made them for the same inputs, else made
// by rank 0 and then mapped by every rank. Collective.
struct TokenFiles {
  std::shared_ptr<const data::TokenFile> train, val;  // val: null when the job does not validate
  bool cached = false;
  std::string train_key;  // what the training token file was made from (training_key)
};

TokenFiles token_files(const job::Job& job, const data::Tokenizer& tokenizer, const data::ExampleOptions& options,
                       int64_t vocab_size, const std::string& tok_path, const DataContext& context) {
  const ExampleMaker maker = example_maker(job, tokenizer, tok_path);
  if (maker.chat && context.rank == 0)
    spdlog::info("chat data: rendered as {}; the loss on {}", maker.chat_how,
                 maker.chat->train_on_all ? "every token ([data] train_on = \"all\")"
                                          : "the assistant's turns, each with the token that ends it");
  const std::string examples = examples_key(job, tok_path, options, maker);
  const std::string fallback = job.job.output_dir + "/token-cache";
  const data::TokenCache train_cache(job.data.train_file, fallback, training_key(job, examples), "training");
  const bool want_val = wants_validation(job);
  const data::TokenCache val_cache(job.data.val_file.empty() ? job.data.train_file : job.data.val_file, fallback,
                                   validation_key(job, examples), "validation");
  TokenFiles out;
  out.train_key = training_key(job, examples);
  out.train = train_cache.open(vocab_size);
  out.val = want_val ? val_cache.open(vocab_size) : nullptr;
  // Collective: another job may be writing the same token files right now, so ranks could see
  // them differently; all tokenize-or-map decisions must be the same.
  out.cached = context.all_agree(out.train != nullptr && (!want_val || out.val != nullptr));
  if (!out.cached) {
    // Rank 0 reads and tokenizes; every rank then maps the token files it wrote.
    if (context.rank == 0)
      build_token_files(job, tokenizer, options, maker, train_cache, want_val ? &val_cache : nullptr);
    context.barrier();
    out.train = train_cache.open(vocab_size);
    out.val = want_val ? val_cache.open(vocab_size) : nullptr;
    ST_CHECK(out.train != nullptr && (!want_val || out.val != nullptr), ErrorKind::kIo,
             "rank {} cannot read the token files rank 0 wrote (under {} or {})", context.rank,
             std::filesystem::path(train_cache.paths()[0]).parent_path().string(), fallback);
  } else if (context.rank == 0) {
    for (const auto& f : {out.train, out.val})
      if (f && !f->notes().empty()) spdlog::warn("from the token cache: {}", f->notes());
  }
  if (context.rank == 0) {
    // Token files of other settings that no job has used for a day: the three most recent stay.
    for (const data::TokenCache* cache : {&train_cache, &val_cache})
      for (const std::string& removed : cache->remove_stale(3, std::chrono::hours(24)))
        spdlog::info("removed the token file {}: made for other data or settings, unused for a day", removed);
  }
  return out;
}

// The items of a token file's key ("name=value ...; name=value"), by name.
std::map<std::string, std::string> key_items(const std::string& key) {
  std::map<std::string, std::string> out;
  for (size_t at = 0; at < key.size();) {
    const size_t end = std::min(key.find("; ", at), key.size());
    const std::string item = key.substr(at, end - at);
    const size_t eq = item.find('=');
    if (eq != std::string::npos) out[item.substr(0, eq)] = item.substr(eq + 1);
    at = end + 2;
  }
  return out;
}

// What decides the samples and their order, besides the tokens: checkpoints record it.
void add_order_items(const job::Job& job, checkpoint::DataIdentity& identity) {
  identity.decides["train.seed"] = std::to_string(job.train.seed);
  identity.decides["train.batching_strategy"] = std::string(job::enum_name(job.train.batching_strategy));
  identity.decides["train.context_length"] = std::to_string(job.train.context_length);
}

// A validation set that evaluates nothing would report a perfect or an undefined loss: an error
// before training, naming where its records come from.
void check_validation(const job::Job& job, const TokenFiles& tokens, const train::Dataset* val) {
  if (tokens.val == nullptr) return;
  const std::string source = job.data.val_file.empty()
                                 ? fmt::format("{} (val_fraction = {})", job.data.train_file, job.data.val_fraction)
                                 : job.data.val_file;
  ST_CHECK(tokens.val->num_examples() > 0, ErrorKind::kConfig,
           "no validation record: {} holds out none of {}, which has fewer than two usable records. HINT: give "
           "[data] val_file, or set [train] run_validation = false",
           source, job.data.train_file);
  ST_CHECK(val != nullptr && val->size() > 0, ErrorKind::kConfig,
           "no validation example of {} keeps a learned token: cut to [train] context_length = {} tokens, every "
           "response is lost behind its prompt. HINT: raise context_length, or give another val_file",
           source, job.train.context_length);
}

}  // namespace

JobData load_job_data(const job::Job& job, const model::LlamaConfig& config, const std::string& tok_path,
                      const DataContext& context) {
  const int world_size = context.world_size;
  JobData out;
  const job::TrainSection& t = job.train;
  if (job.data.format == job::DataFormat::kSynthetic) {
    out.train = std::make_unique<train::SyntheticCopyDataset>(1 << 16, t.context_length, config.vocab_size,
                                                              static_cast<uint64_t>(t.seed));
    // The same rows at every world size.
    out.val = std::make_unique<train::SyntheticCopyDataset>(t.val_batch_size * 8, t.context_length, config.vocab_size,
                                                            static_cast<uint64_t>(t.seed) + 1);
    out.identity.decides["training tokens"] = "synthetic";
    out.identity.decides["training samples"] = std::to_string(out.train->size());
    add_order_items(job, out.identity);
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

  const TokenFiles tokens = token_files(job, tokenizer, options, config.vocab_size, tok_path, context);
  out.train = batched(tokens.train, job, options, "training", tokens.cached);
  ST_CHECK(out.train->size() > 0, ErrorKind::kConfig,
           "no training example of {} keeps a learned token: cut to [train] context_length = {} tokens, every "
           "response is lost behind its prompt. HINT: raise [train] context_length, or use batching_strategy = "
           "\"packing\" with [data] long_examples = \"split\"",
           job.data.train_file, t.context_length);
  out.identity.decides["training tokens"] =
      fmt::format("{} examples, {} tokens, checksum {:016x}", tokens.train->num_examples(), tokens.train->num_tokens(),
                  tokens.train->checksum());
  out.identity.decides["training samples"] = std::to_string(out.train->size());
  add_order_items(job, out.identity);
  out.identity.made_from = key_items(tokens.train_key);
  if (tokens.val != nullptr && tokens.val->num_examples() > 0)
    out.val = batched(tokens.val, job, options, "validation", tokens.cached);
  check_validation(job, tokens, out.val.get());

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
