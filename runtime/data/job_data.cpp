// The job's data on every rank: the tokenizer, the token files, and the datasets the trainer draws
// samples from.
#include "runtime/data/job_data.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <filesystem>

#include <fmt/ranges.h>

#include "common/error.h"
#include "common/job/schema.h"
#include "common/subprocess.h"
#include "runtime/data/job_tokens.h"
#include "runtime/data/learned_only.h"
#include "runtime/data/mixed_dataset.h"
#include "runtime/data/packed_dataset.h"
#include "runtime/data/packed_rows.h"
#include "runtime/data/padded_dataset.h"
#include "runtime/data/preference_dataset.h"
#include "runtime/data/tokenizer.h"

namespace shardtune::data {
namespace {

using common::ErrorKind;

std::unique_ptr<Dataset> batched(std::shared_ptr<const TokenFile> tokens, const job::Job& job,
                                 const ExampleOptions& options, const char* what, bool cached) {
  int64_t learned = 0;
  for (const int32_t l : tokens->labels()) learned += l != kIgnoreLabel;
  const int64_t pad = options.eos >= 0 ? options.eos : 0;
  const char* from_cache = cached ? " (tokens cached by an earlier run)" : "";
  if (job.data.format == job::DataFormat::kPreference) {
    auto pairs = std::make_unique<PreferenceDataset>(tokens, pad);
    spdlog::info("{} data: {} preference pairs, {} tokens ({} in answers, the rest prompts), at most {} per sequence, "
                 "batched by length and padded{}",
                 what, pairs->size(), tokens->num_tokens(), learned, job.train.context_length, from_cache);
    return pairs;
  }
  if (job.train.batching_strategy == job::BatchingStrategy::kPadding) {
    auto examples = std::make_unique<LearnedOnly>(std::make_unique<PaddedDataset>(tokens, pad));
    spdlog::info("{} data: {} examples, {} tokens ({} learned, the rest prompt), at most {} per example, batched by "
                 "length and padded{}{}",
                 what, tokens->num_examples(), tokens->num_tokens(), learned, job.train.context_length,
                 examples->left_out() > 0
                     ? fmt::format("; {} example(s) left out, truncation left them no learned token", examples->left_out())
                     : "",
                 from_cache);
    return examples;
  }
  PackedRowView view(tokens, job.train.context_length, static_cast<int32_t>(pad));
  const int64_t all_rows = view.rows();
  auto rows = std::make_unique<LearnedOnly>(std::make_unique<PackedDataset>(std::move(view)));
  spdlog::info("{} data: {} examples, {} tokens ({} learned, the rest prompt), packed into {} rows of {}{}{}", what,
               tokens->num_examples(), tokens->num_tokens(), learned, all_rows, job.train.context_length,
               rows->left_out() > 0 ? fmt::format("; {} row(s) left out, they hold only prompt tokens", rows->left_out())
                                    : "",
               from_cache);
  return rows;
}

// What decides the samples and their order, besides the tokens: checkpoints record it.
void add_order_items(const job::Job& job, DataIdentity& identity) {
  identity.decides["train.seed"] = std::to_string(job.train.seed);
  identity.decides["train.batching_strategy"] = std::string(job::enum_name(job.train.batching_strategy));
  identity.decides["train.context_length"] = std::to_string(job.train.context_length);
}

// A validation set that evaluates nothing would report a perfect or an undefined loss: an error
// before training, naming where its records come from.
void check_validation(const job::Job& job, const TokenFiles& tokens, const Dataset* val) {
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

// At least one global batch per epoch, or the run could take no step.
void check_global_batch(const job::Job& job, const JobData& data, int world_size) {
  const job::TrainSection& t = job.train;
  const int64_t global_batch = t.global_batch(world_size);
  const int64_t epoch = data.mixture.epoch_samples();
  const std::string from = job.data_sources.empty() ? job.data.train_file : "the mixture of [[data.sources]]";
  ST_CHECK(epoch >= global_batch, ErrorKind::kConfig,
           "{} gives {} training samples per epoch ({}), fewer than one global batch of {} ({} per rank x {} ranks x "
           "{} accumulation). HINT: more data, or a smaller batch_size_training or context_length{}",
           from.empty() ? std::string("the synthetic data") : from, epoch,
           t.batching_strategy == job::BatchingStrategy::kPadding ? "one per example"
                                                                  : fmt::format("rows of {} tokens", t.context_length),
           global_batch, t.batch_size_training, world_size, t.gradient_accumulation_steps,
           job.data.samples_per_epoch > 0 ? ", or a larger [data] samples_per_epoch" : "");
}

// What the epoch takes of each source: recorded (a resume over another mix is refused) and logged.
void add_epoch_items(const job::Job& job, JobData& data) {
  if (job.data.samples_per_epoch > 0)
    data.identity.decides["data.samples_per_epoch"] = std::to_string(job.data.samples_per_epoch);
  const Mixture& m = data.mixture;
  if (m.sources().size() < 2 && job.data.samples_per_epoch == 0) return;
  std::vector<std::string> parts;
  for (size_t s = 0; s < m.sources().size(); ++s) {
    const MixtureSource& src = m.sources()[s];
    parts.push_back(fmt::format("{} {} of its {} ({:.3g} of a pass, share {:.3f} for weight {:.3f})",
                                src.name.empty() ? "the data" : fmt::format("\"{}\"", src.name), m.per_epoch()[s],
                                src.size, static_cast<double>(m.per_epoch()[s]) / static_cast<double>(src.size),
                                static_cast<double>(m.per_epoch()[s]) / static_cast<double>(m.epoch_samples()),
                                src.weight / [&] {
                                  double total = 0;
                                  for (const MixtureSource& x : m.sources()) total += x.weight;
                                  return total;
                                }()));
    if (m.per_epoch()[s] == 0)
      spdlog::warn("source \"{}\" takes no sample in an epoch of {}: its weight is too small for the epoch. HINT: "
                   "raise its weight or [data] samples_per_epoch",
                   src.name, m.epoch_samples());
  }
  spdlog::info("mixture: an epoch takes {} samples: {}", m.epoch_samples(), fmt::join(parts, "; "));
}

JobData synthetic_data(const job::Job& job, const ModelTokens& model) {
  const job::TrainSection& t = job.train;
  JobData out;
  out.train = std::make_unique<SyntheticCopyDataset>(1 << 16, t.context_length, model.vocab_size,
                                                     static_cast<uint64_t>(t.seed));
  // The same rows at every world size.
  out.val = std::make_unique<SyntheticCopyDataset>(t.val_batch_size * 8, t.context_length, model.vocab_size,
                                                   static_cast<uint64_t>(t.seed) + 1);
  out.identity.decides["training tokens"] = "synthetic";
  out.identity.decides["training samples"] = std::to_string(out.train->size());
  add_order_items(job, out.identity);
  return out;
}

// One source's data, as a job of that source alone trains it. `name`: the source's, for the log.
JobData load_source(const job::Job& job, const std::string& name, const ModelTokens& model, const Tokenizer& tokenizer,
                    const std::string& tok_path, const DataContext& context) {
  const ExampleOptions options = example_options(job, tokenizer, model);
  const JobTokens recipe(job, tokenizer, tok_path, options);
  const std::string what = name.empty() ? "training" : fmt::format("source \"{}\": training", name);
  const std::string val_what = name.empty() ? "validation" : fmt::format("source \"{}\": validation", name);
  if (context.rank == 0 && !recipe.chat_description().empty())
    spdlog::info("{}chat data: rendered as {}", name.empty() ? "" : fmt::format("source \"{}\": ", name),
                 recipe.chat_description());
  const TokenFiles tokens = recipe.open_or_make(model.vocab_size, context);

  JobData out;
  out.train = batched(tokens.train, job, options, what.c_str(), tokens.cached);
  ST_CHECK(out.train->size() > 0, ErrorKind::kConfig,
           "no training example of {} keeps a learned token: cut to [train] context_length = {} tokens, every "
           "response is lost behind its prompt. HINT: raise [train] context_length, or use batching_strategy = "
           "\"packing\" with [data] long_examples = \"split\"",
           job.data.train_file, job.train.context_length);
  out.identity.decides["training tokens"] =
      fmt::format("{} examples, {} tokens, checksum {:016x}", tokens.train->num_examples(), tokens.train->num_tokens(),
                  tokens.train->checksum());
  out.identity.decides["training samples"] = std::to_string(out.train->size());
  out.identity.made_from = key_items(recipe.training_key());
  if (tokens.val != nullptr && tokens.val->num_examples() > 0)
    out.val = batched(tokens.val, job, options, val_what.c_str(), tokens.cached);
  check_validation(job, tokens, out.val.get());
  return out;
}

// Every source loaded as a job of its own, joined in the order of the job file; the identity names
// each source's tokens and weight.
JobData mix_sources(const job::Job& job, const ModelTokens& model, const Tokenizer& tokenizer,
                    const std::string& tok_path, const DataContext& context) {
  std::vector<std::unique_ptr<Dataset>> train_parts, val_parts;
  std::vector<MixtureSource> sources;
  JobData out;
  int64_t val_offset = 0;
  for (const job::DataSource& source : job.data_sources) {
    job::Job alone = job;
    alone.data = source.data;
    alone.data_sources.clear();
    JobData part = load_source(alone, source.name, model, tokenizer, tok_path, context);
    const int64_t offset = sources.empty() ? 0 : sources.back().offset + sources.back().size;
    sources.push_back({source.name, source.weight, offset, part.train->size()});
    // One source trains as [data] alone does (its weight changes nothing): the same identity, so
    // that either spelling resumes the other's checkpoints.
    const bool alone_in_mix = job.data_sources.size() == 1;
    const std::string prefix = alone_in_mix ? "" : fmt::format("source {}: ", source.name);
    for (const auto& [key, value] : part.identity.decides) out.identity.decides[prefix + key] = value;
    if (!alone_in_mix) out.identity.decides[prefix + "weight"] = fmt::format("{}", source.weight);
    for (const auto& [key, value] : part.identity.made_from) out.identity.made_from[prefix + key] = value;
    train_parts.push_back(std::move(part.train));
    if (part.val != nullptr) {
      out.val_sources.push_back({source.name, source.weight, val_offset, part.val->size()});
      val_offset += part.val->size();
      val_parts.push_back(std::move(part.val));
    }
  }
  // Each source's order is seeded by its place in the job file, and the mix's ties go to the first:
  // sources swapped would train some samples twice and others never.
  if (job.data_sources.size() > 1) {
    std::vector<std::string> names;
    for (const job::DataSource& source : job.data_sources) names.push_back(source.name);
    out.identity.decides[std::string(kSourceOrderKey)] = fmt::format("{}", fmt::join(names, ", "));
  }
  out.train = std::make_unique<ConcatDataset>(std::move(train_parts));
  if (!val_parts.empty()) out.val = std::make_unique<ConcatDataset>(std::move(val_parts));
  out.mixture = Mixture(std::move(sources), job.data.samples_per_epoch);
  return out;
}

}  // namespace

std::string tokenizer_path(const job::Job& job) {
  if (job.data.format == job::DataFormat::kSynthetic) return "";
  if (!job.data.tokenizer.empty()) return job.data.tokenizer;
  if (job.model.path.empty()) return "";
  const std::string json = job.model.path + "/tokenizer.json", model = job.model.path + "/tokenizer.model";
  return !std::filesystem::exists(json) && std::filesystem::exists(model) ? model : json;
}

DataContext single_rank() {
  return {0, 1, [](const std::string&, const std::function<std::string()>& decide) { return decide(); },
          [](bool mine) { return mine; }};
}

std::string prepare_tokenizer(const job::Job& job, const DataContext& context, const std::string& tool) {
  const std::string path = tokenizer_path(job);
  if (path.size() < 6 || path.compare(path.size() - 6, 6, ".model") != 0) return path;
  return context.on_root("converting the SentencePiece model", [&] {
    const std::string converted = job.job.output_dir + "/tokenizer/tokenizer.json";
    std::filesystem::create_directories(job.job.output_dir + "/tokenizer");
    const common::CommandResult r = common::run_command({tool, path, "--write-json", converted});
    ST_CHECK(r.exit_code == 0, ErrorKind::kConfig, "cannot convert {} to tokenizer.json: {}", path, r.err);
    spdlog::info("converted the SentencePiece model {} to {}", path, converted);
    return converted;
  });
}

JobData load_job_data(const job::Job& job, const ModelTokens& model, const std::string& tok_path,
                      const DataContext& context) {
  if (job.data.format == job::DataFormat::kSynthetic) {
    JobData out = synthetic_data(job, model);
    out.mixture = Mixture::single(out.train->size(), job.data.samples_per_epoch);
    add_epoch_items(job, out);
    check_global_batch(job, out, context.world_size);
    return out;
  }
  ST_CHECK(!tok_path.empty(), ErrorKind::kConfig, "[data] format \"{}\" needs a tokenizer: set [data] tokenizer",
           job::enum_name(job.data.format));
  const Tokenizer tokenizer = Tokenizer::from_file(tok_path);
  ST_CHECK(tokenizer.vocab_size() <= model.vocab_size, ErrorKind::kConfig,
           "{} has {} tokens but the model's vocabulary has {}: a tokenizer of another model?", tok_path,
           tokenizer.vocab_size(), model.vocab_size);
  if (job.data_sources.empty()) {
    JobData out = load_source(job, "", model, tokenizer, tok_path, context);
    add_order_items(job, out.identity);
    out.mixture = Mixture::single(out.train->size(), job.data.samples_per_epoch);
    add_epoch_items(job, out);
    check_global_batch(job, out, context.world_size);
    return out;
  }
  JobData out = mix_sources(job, model, tokenizer, tok_path, context);
  add_order_items(job, out.identity);
  add_epoch_items(job, out);
  check_global_batch(job, out, context.world_size);
  return out;
}

}  // namespace shardtune::data
