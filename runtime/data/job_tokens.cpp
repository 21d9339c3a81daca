// The job's token files: keys, the hold-out split, tokenizing once, mapping everywhere.
#include "runtime/data/job_tokens.h"

#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <map>
#include <numeric>
#include <optional>
#include <random>

#include "common/error.h"
#include "common/file_io.h"
#include "common/job/schema.h"
#include "common/log.h"
#include "runtime/data/chat.h"
#include "runtime/data/preference_pairs.h"
#include "runtime/data/token_cache.h"

namespace shardtune::data {
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
// conversation rendered in the model's chat format; preference pairs as two examples each, their
// prompts rendered either way.
struct ExampleMaker {
  bool pairs = false;               // format = "preference"
  PromptFormat format;             // not chat
  std::optional<ChatOptions> chat;  // chat, or preference when the chat format is known
  std::string chat_how;             // where the chat format came from, for the log and the token key
  std::string no_chat;              // preference: why conversations cannot be rendered, if they cannot

  Example make(const Tokenizer& tokenizer, const Record& r, const ExampleOptions& options) const {
    if (chat && !pairs) return chat_example(tokenizer, render_chat(r.turns, *chat), options.max_tokens, r.where);
    return make_example(tokenizer, format.prompt(r), r.fields.at(format.response_field), options);
  }

  // A pair's chosen and rejected examples, cut by truncate_pair; `cut` tells whether it was.
  std::pair<Example, Example> make_pair(const Tokenizer& tokenizer, const Record& r, const ExampleOptions& options,
                                        bool& cut) const {
    ExampleOptions whole = options;
    whole.max_tokens = 0;
    auto answer = [&](const std::string& key) {
      if (r.turns.empty()) return make_example(tokenizer, format.prompt(r), r.fields.at(key), whole);
      ST_CHECK(chat.has_value(), ErrorKind::kConfig, "{}: a conversational pair, and {}", r.where, no_chat);
      std::vector<Turn> turns = r.turns;
      turns.push_back({"assistant", r.fields.at(key)});
      return chat_example(tokenizer, learn_last_turn(render_chat(turns, *chat)), 0, r.where);
    };
    std::pair<Example, Example> out{answer("chosen"), answer("rejected")};
    cut = truncate_pair(out.first, out.second, options.max_tokens, options.bos);
    return out;
  }
};

ExampleMaker example_maker(const job::Job& job, const Tokenizer& tokenizer, const std::string& tok_path) {
  ExampleMaker m;
  m.pairs = job.data.format == job::DataFormat::kPreference;
  if (job.data.format != job::DataFormat::kChat) m.format = prompt_format(job.data);
  if (job.data.format != job::DataFormat::kChat && !m.pairs) return m;
  // The template sits beside the tokenizer the job names (a tokenizer.model is converted elsewhere).
  // Pairs of text need none: only a conversational pair asks for it.
  std::optional<ChatChoice> choice;
  try {
    choice = choose_chat_style(job.data.chat_format, tokenizer_path(job));
  } catch (const common::Error& e) {
    if (!m.pairs) throw;
    m.no_chat = e.what();
    return m;
  }
  ChatOptions o = chat_options(choice->style, tokenizer, tok_path);
  o.train_on_all = job.data.train_on == job::TrainOn::kAll;
  m.chat = o;
  m.chat_how = fmt::format("{} ({})", chat_style_name(choice->style), choice->how);
  return m;
}

RecordFile read(const job::Job& job, const ExampleMaker& maker, const std::string& path, Findings& findings) {
  const bool skip = job.data.on_bad_record == job::BadRecordPolicy::kSkip;
  RecordFile f = maker.pairs  ? read_preferences(path, maker.format.required, maker.format.may_be_empty, skip)
                 : maker.chat ? read_conversations(path, skip)
                              : read_records(path, maker.format.required, maker.format.may_be_empty, skip);
  if (f.skipped > 0) {
    findings.warn(fmt::format("{}: skipped {} bad record(s) of {}; first: {}", path, f.skipped,
                              f.skipped + static_cast<int64_t>(f.records.size()), fmt::join(f.skip_reasons, "; ")));
  }
  ST_CHECK(!f.records.empty(), ErrorKind::kConfig, "{}: no usable records", path);
  return f;
}

// The validation set is the val_file's, or a share of the training file's records (val_fraction),
// held out only when the job validates.
bool wants_validation(const job::Job& job) {
  return job.train.run_validation && (!job.data.val_file.empty() || job.data.val_fraction > 0);
}

// The version of the reading, prompting and tokenizing code itself, in every key.
constexpr int kTokenRules = 3;

std::string examples_key(const job::Job& job, const std::string& tokenizer, const ExampleOptions& options,
                         const ExampleMaker& maker) {
  const std::string tokenizer_bytes = common::read_file(tokenizer, ErrorKind::kConfig, "the tokenizer");
  const std::string chat = maker.chat ? fmt::format("; chat={} bos={} eos={} train_on={}", maker.chat_how,
                                                    maker.chat->bos, maker.chat->eos, job::enum_name(job.data.train_on))
                                      : std::string();
  return fmt::format("rules={}; tokenizer={:016x}; format={} prompt_field={} response_field={} template={:016x}; "
                     "bos={} eos={} max_tokens={}; on_bad_record={}{}",
                     kTokenRules, fingerprint(tokenizer_bytes), job::enum_name(job.data.format),
                     job.data.prompt_field, job.data.response_field, fingerprint(job.data.prompt_template),
                     options.bos, options.eos, options.max_tokens, job::enum_name(job.data.on_bad_record), chat);
}

std::string train_key(const job::Job& job, const std::string& examples) {
  return fmt::format("{}; data={}; split={}", examples, data_file_stamp(job.data.train_file),
                     splits_training_file(job)
                         ? fmt::format("val_fraction={} seed={}", job.data.val_fraction, job.train.seed)
                         : std::string("none"));
}

std::string val_key(const job::Job& job, const std::string& examples) {
  if (!job.data.val_file.empty()) return fmt::format("{}; data={}", examples, data_file_stamp(job.data.val_file));
  return train_key(job, examples) + "; held out";
}

std::vector<Example> tokenize(const std::vector<Record>& records, const ExampleMaker& maker, const Tokenizer& tokenizer,
                              const ExampleOptions& options, const std::string& what, Findings& findings) {
  common::Progress progress(common::logged_progress("tokenizing the " + what + " data",
                                                    static_cast<int64_t>(records.size()), common::ProgressUnit::kCount,
                                                    "examples"));
  std::vector<Example> examples;
  examples.reserve((maker.pairs ? 2 : 1) * records.size());
  std::vector<std::string> cut;  // pairs truncation cut; examples it left without a learned token
  for (const Record& r : records) {
    if (maker.pairs) {  // two examples a pair, chosen first
      bool was_cut = false;
      auto [chosen, rejected] = maker.make_pair(tokenizer, r, options, was_cut);
      examples.push_back(std::move(chosen));
      examples.push_back(std::move(rejected));
      if (was_cut) cut.push_back(r.where);
    } else {
      examples.push_back(maker.make(tokenizer, r, options));
      const std::vector<int32_t>& labels = examples.back().labels;
      if (std::all_of(labels.begin() + std::min<size_t>(1, labels.size()), labels.end(),
                      [](int32_t l) { return l == kIgnoreLabel; }))
        cut.push_back(r.where);
    }
    progress.add(1);
  }
  progress.finish("tokenized the " + what + " data");
  if (!cut.empty()) {
    const std::string places = fmt::format(
        "{}{}", fmt::join(cut.begin(), cut.begin() + static_cast<std::ptrdiff_t>(std::min<size_t>(cut.size(), 10)), ", "),
        cut.size() > 10 ? fmt::format(" and {} more", cut.size() - 10) : "");
    findings.warn(maker.pairs ? fmt::format("{} of {} {} pairs are longer than context_length = {}: their prompts lost "
                                            "their first tokens (down to half the context at most) and then their "
                                            "answers their last ones: {}",
                                            cut.size(), records.size(), what, options.max_tokens, places)
                              : fmt::format("{} of {} {} examples keep no learned token once cut to context_length = {} "
                                            "(their prompts fill it): they are left out: {}",
                                            cut.size(), records.size(), what, options.max_tokens, places));
  }
  return examples;
}

}  // namespace

std::vector<Record> hold_out(std::vector<Record>& records, double fraction, int64_t seed) {
  std::vector<Record> held;
  if (records.size() < 2) return held;
  std::vector<size_t> order(records.size());
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), std::mt19937_64(static_cast<uint64_t>(seed)));
  const size_t n_val = std::max<size_t>(1, static_cast<size_t>(fraction * static_cast<double>(order.size())));
  std::vector<bool> is_val(order.size(), false);
  for (size_t i = 0; i < n_val; ++i) is_val[order[i]] = true;
  std::vector<Record> kept;
  for (size_t i = 0; i < records.size(); ++i) (is_val[i] ? held : kept).push_back(std::move(records[i]));
  records = std::move(kept);
  return held;
}

ExampleOptions example_options(const job::Job& job, const Tokenizer& tokenizer, const ModelTokens& model) {
  ExampleOptions options;
  options.bos = tokenizer.bos_id().value_or(static_cast<int32_t>(model.bos_token_id));
  options.eos = tokenizer.eos_id().value_or(model.eos_token_ids.empty() ? -1 : static_cast<int32_t>(model.eos_token_ids[0]));
  if (job.train.batching_strategy == job::BatchingStrategy::kPadding ||
      job.data.long_examples == job::LongExamples::kTruncate)
    options.max_tokens = job.train.context_length;
  return options;
}

bool splits_training_file(const job::Job& job) {
  return job.train.run_validation && job.data.val_file.empty() && job.data.val_fraction > 0;
}

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

struct JobTokens::Impl {
  Impl(const job::Job& j, const Tokenizer& t, const std::string& tokenizer_file, const ExampleOptions& o)
      : job(j), tokenizer(t), options(o), maker(example_maker(j, t, tokenizer_file)) {
    const std::string examples = examples_key(job, tokenizer_file, options, maker);
    training = train_key(job, examples);
    validation = val_key(job, examples);
  }

  // Reads, splits and tokenizes the records; writes the token files.
  void build(const TokenCache& train_cache, const TokenCache* val_cache) const {
    Findings train_findings, val_findings;
    std::vector<Record> train_records = read(job, maker, job.data.train_file, train_findings).records;
    std::vector<Record> val_records;
    if (val_cache != nullptr && !job.data.val_file.empty()) {
      val_records = read(job, maker, job.data.val_file, val_findings).records;
    } else if (splits_training_file(job)) {
      val_records = hold_out(train_records, job.data.val_fraction, job.train.seed);
    }
    train_cache.write(tokenize(train_records, maker, tokenizer, options, "training", train_findings),
                      train_findings.notes());
    if (val_cache != nullptr)
      val_cache->write(tokenize(val_records, maker, tokenizer, options, "validation", val_findings),
                       val_findings.notes());
  }

  const job::Job job;
  const Tokenizer& tokenizer;
  const ExampleOptions options;
  const ExampleMaker maker;
  std::string training, validation;
};

JobTokens::JobTokens(const job::Job& job, const Tokenizer& tokenizer, const std::string& tokenizer_file,
                     const ExampleOptions& options)
    : impl_(std::make_unique<Impl>(job, tokenizer, tokenizer_file, options)) {}
JobTokens::~JobTokens() = default;

const std::string& JobTokens::training_key() const { return impl_->training; }
const std::string& JobTokens::validation_key() const { return impl_->validation; }

std::string JobTokens::chat_description() const {
  const ExampleMaker& m = impl_->maker;
  if (!m.chat) return "";
  if (m.pairs)
    return fmt::format("{}, for pairs whose prompt is a conversation; each answer's log-probability over its last "
                       "turn and the token that ends it",
                       m.chat_how);
  return fmt::format("{}; the loss on {}", m.chat_how,
                     m.chat->train_on_all ? "every token ([data] train_on = \"all\")"
                                          : "the assistant's turns, each with the token that ends it");
}

TokenFiles JobTokens::open_or_make(int64_t vocab_size, const DataContext& context) const {
  const job::Job& job = impl_->job;
  const std::string fallback = job.job.output_dir + "/token-cache";
  const TokenCache train_cache(job.data.train_file, fallback, impl_->training, "training");
  const bool want_val = wants_validation(job);
  const TokenCache val_cache(job.data.val_file.empty() ? job.data.train_file : job.data.val_file, fallback,
                             impl_->validation, "validation");
  TokenFiles out;
  out.train = train_cache.open(vocab_size);
  out.val = want_val ? val_cache.open(vocab_size) : nullptr;
  // Another job may be writing the same token files right now, so ranks could see them
  // differently; all tokenize-or-map decisions must be the same.
  out.cached = context.all_agree(out.train != nullptr && (!want_val || out.val != nullptr));
  if (!out.cached) {
    // Rank 0 reads and tokenizes (the others wait for it, however long it takes, while it
    // answers for them); every rank then maps the token files it wrote.
    context.on_root("tokenizing the data", [&] {
      impl_->build(train_cache, want_val ? &val_cache : nullptr);
      return std::string();
    });
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
    for (const TokenCache* cache : {&train_cache, &val_cache})
      for (const std::string& removed : cache->remove_stale(3, std::chrono::hours(24)))
        spdlog::info("removed the token file {}: made for other data or settings, unused for a day", removed);
  }
  return out;
}

}  // namespace shardtune::data
