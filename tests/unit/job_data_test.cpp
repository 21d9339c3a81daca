// The job's data pipeline on one rank, without the rank program: the seeded hold-out split, the
// token files' keys (every input that changes the tokens changes the key, nothing else does), the
// token cache made once and mapped after, and the refusals before training.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "common/error.h"
#include "runtime/data/job_data.h"
#include "runtime/data/job_tokens.h"

namespace shardtune::data {
namespace {

namespace fs = std::filesystem;

const std::string kTokenizer = std::string(ST_SOURCE_DIR) + "/configs/data/tiny-tokenizer/tokenizer.json";
const ModelTokens kModel{558, 556, {557}};  // the tokenizer's vocabulary and special tokens

std::vector<Record> numbered(size_t n) {
  std::vector<Record> out(n);
  for (size_t i = 0; i < n; ++i) out[i].where = fmt::format("line {}", i + 1);
  return out;
}

std::vector<std::string> wheres(const std::vector<Record>& records) {
  std::vector<std::string> out;
  for (const Record& r : records) out.push_back(r.where);
  return out;
}

TEST(HoldOut, AFractionOfAtLeastOneLeavesEveryOtherRecordInItsOrder) {
  for (size_t n : {2u, 3u, 10u, 101u}) {
    for (double fraction : {0.01, 0.05, 0.5}) {
      SCOPED_TRACE(testing::Message() << n << " records, fraction " << fraction);
      std::vector<Record> records = numbered(n);
      const std::vector<Record> held = hold_out(records, fraction, 42);
      // floor(fraction * n), and never none.
      EXPECT_EQ(held.size(), std::max<size_t>(1, static_cast<size_t>(fraction * static_cast<double>(n))));
      EXPECT_EQ(records.size() + held.size(), n);
      std::set<std::string> all;
      for (const std::string& w : wheres(records)) all.insert(w);
      for (const std::string& w : wheres(held)) EXPECT_TRUE(all.insert(w).second) << w << " both kept and held out";
      EXPECT_EQ(all.size(), n);
      // The kept records keep the file's order: packing follows it.
      std::vector<std::string> kept = wheres(records), sorted_kept = kept;
      std::sort(sorted_kept.begin(), sorted_kept.end(), [](const std::string& a, const std::string& b) {
        return std::stoi(a.substr(5)) < std::stoi(b.substr(5));
      });
      EXPECT_EQ(kept, sorted_kept);
    }
  }
}

TEST(HoldOut, TheSplitIsTheSeedsAloneAndOneRecordIsNeverHeldOut) {
  std::vector<Record> a = numbered(200), b = numbered(200), c = numbered(200);
  const std::vector<Record> held_a = hold_out(a, 0.1, 7), held_b = hold_out(b, 0.1, 7), held_c = hold_out(c, 0.1, 8);
  EXPECT_EQ(wheres(held_a), wheres(held_b));
  EXPECT_NE(wheres(held_a), wheres(held_c));
  std::vector<Record> one = numbered(1);
  EXPECT_TRUE(hold_out(one, 0.5, 7).empty());
  EXPECT_EQ(one.size(), 1u);
}

// A job on an alpaca file of `n` records, in a folder of its own.
class JobDataTest : public testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / fmt::format("shardtune_job_data_{}_{}", ::getpid(), counter_++);
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    job_.job.output_dir = (dir_ / "out").string();
    job_.data.format = job::DataFormat::kAlpaca;
    job_.data.tokenizer = kTokenizer;
    job_.data.train_file = write_records("train.jsonl", 40);
    job_.train.context_length = 32;
    job_.train.batch_size_training = 2;
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string write_records(const std::string& name, int n, const std::string& salt = "") {
    const std::string path = (dir_ / name).string();
    std::ofstream out(path);
    for (int i = 0; i < n; ++i)
      out << fmt::format(R"({{"instruction": "Repeat the word {}", "input": "stone{}", "output": "stone {}{}"}})", i,
                         salt, i, salt)
          << "\n";
    return path;
  }

  JobTokens tokens() const {
    static const Tokenizer tokenizer = Tokenizer::from_file(kTokenizer);
    return JobTokens(job_, tokenizer, kTokenizer, example_options(job_, tokenizer, kModel));
  }

  fs::path dir_;
  job::Job job_;
  static inline int counter_ = 0;
};

TEST_F(JobDataTest, EveryInputOfTheTokensChangesTheKeyAndNothingElseDoes) {
  const std::string base = tokens().training_key();
  EXPECT_EQ(tokens().training_key(), base);  // the same inputs, the same key
  EXPECT_NE(tokens().validation_key(), base);
  const std::vector<std::pair<std::string, std::function<void(job::Job&)>>> changes_tokens = {
      {"prompt_template", [](job::Job& j) { j.data.prompt_template = "Q: {instruction}\nA: "; }},
      {"response_field", [](job::Job& j) { j.data.response_field = "input"; }},
      {"on_bad_record", [](job::Job& j) { j.data.on_bad_record = job::BadRecordPolicy::kSkip; }},
      {"seed (splitting)", [](job::Job& j) { j.train.seed = 7; }},
      {"val_fraction", [](job::Job& j) { j.data.val_fraction = 0.2; }},
      {"a val_file (no split)", [this](job::Job& j) { j.data.val_file = (dir_ / "train.jsonl").string(); }},
      {"padding (truncates)", [](job::Job& j) { j.train.batching_strategy = job::BatchingStrategy::kPadding; }},
      {"long_examples = truncate", [](job::Job& j) { j.data.long_examples = job::LongExamples::kTruncate; }},
  };
  for (const auto& [what, change] : changes_tokens) {
    const job::Job saved = job_;
    change(job_);
    EXPECT_NE(tokens().training_key(), base) << what;
    job_ = saved;
  }
  const std::vector<std::pair<std::string, std::function<void(job::Job&)>>> changes_nothing = {
      {"lr", [](job::Job& j) { j.train.lr = 3e-3; }},
      {"batch size", [](job::Job& j) { j.train.batch_size_training = 8; }},
      {"output_dir", [this](job::Job& j) { j.job.output_dir = (dir_ / "elsewhere").string(); }},
      {"context_length (packing splits, never truncates)", [](job::Job& j) { j.train.context_length = 64; }},
  };
  for (const auto& [what, change] : changes_nothing) {
    const job::Job saved = job_;
    change(job_);
    EXPECT_EQ(tokens().training_key(), base) << what;
    job_ = saved;
  }
  // Truncating examples: the context length is an input of the tokens.
  job_.data.long_examples = job::LongExamples::kTruncate;
  const std::string truncated = tokens().training_key();
  job_.train.context_length = 64;
  EXPECT_NE(tokens().training_key(), truncated);
  job_.data.long_examples = job::LongExamples::kSplit;
  job_.train.context_length = 32;
  // The data file's content: an edit makes another key.
  write_records("train.jsonl", 40, "x");
  EXPECT_NE(tokens().training_key(), base);
  // Without validation nothing is held out: the seed no longer matters.
  job_.train.run_validation = false;
  const std::string no_split = tokens().training_key();
  job_.train.seed = 9;
  EXPECT_EQ(tokens().training_key(), no_split);
  EXPECT_EQ(key_items(no_split).at("split"), "none");
}

TEST_F(JobDataTest, RankZeroMakesTheTokenFilesOnceAndLaterRunsMapThem) {
  int made = 0;
  DataContext context = single_rank();
  context.on_root = [&made](const std::string& what, const std::function<std::string()>& decide) {
    EXPECT_EQ(what, "tokenizing the data");
    ++made;
    return decide();
  };
  const TokenFiles first = tokens().open_or_make(558, context);
  EXPECT_FALSE(first.cached);
  EXPECT_EQ(made, 1);
  ASSERT_NE(first.train, nullptr);
  ASSERT_NE(first.val, nullptr);
  // 40 records, 5% held out: 2 for validation, 38 trained on.
  EXPECT_EQ(first.val->num_examples(), 2);
  EXPECT_EQ(first.train->num_examples(), 38);
  const TokenFiles second = tokens().open_or_make(558, context);
  EXPECT_TRUE(second.cached);
  EXPECT_EQ(made, 1);
  EXPECT_EQ(second.train->checksum(), first.train->checksum());
  EXPECT_EQ(second.val->checksum(), first.val->checksum());
  // Ranks that disagree on what is cached all make it anew.
  context.all_agree = [](bool) { return false; };
  EXPECT_FALSE(tokens().open_or_make(558, context).cached);
  EXPECT_EQ(made, 2);
}

TEST_F(JobDataTest, TheDatasetsAndTheirIdentityFollowTheJob) {
  const ModelTokens model = kModel;
  const JobData data = load_job_data(job_, model, kTokenizer, single_rank());
  ASSERT_NE(data.val, nullptr);
  EXPECT_GT(data.train->size(), 0);
  EXPECT_EQ(data.identity.decides.at("train.seed"), "42");
  EXPECT_EQ(data.identity.decides.at("training samples"), std::to_string(data.train->size()));
  EXPECT_EQ(data.identity.made_from.at("split"), "val_fraction=0.05 seed=42");
  for (int64_t i = 0; i < data.train->size(); ++i)
    EXPECT_LE(static_cast<int64_t>(data.train->get(i).input_ids.size()), job_.train.context_length);
  // Another seed orders the samples otherwise, and splits otherwise: the identity says so.
  job_.train.seed = 7;
  EXPECT_NE(load_job_data(job_, model, kTokenizer, single_rank()).identity.decides.at("training tokens"),
            data.identity.decides.at("training tokens"));
}

// Each source's order is seeded by its place in the job file: the identity records the places, so
// that a resume with the sources swapped is refused instead of training samples twice and never.
TEST_F(JobDataTest, TheIdentityOfSeveralSourcesRecordsTheirOrder) {
  job::DataSource a, b;
  a.name = "a", a.data = job_.data;
  b.name = "b", b.data = job_.data;
  b.data.train_file = write_records("b.jsonl", 30, "x");
  job_.data_sources = {a, b};
  const JobData ab = load_job_data(job_, kModel, kTokenizer, single_rank());
  EXPECT_EQ(ab.identity.decides.at("source order"), "a, b");
  job_.data_sources = {b, a};
  const JobData ba = load_job_data(job_, kModel, kTokenizer, single_rank());
  EXPECT_EQ(ba.identity.decides.at("source order"), "b, a");
  // Every other entry is the same: the order alone tells the two apart.
  std::map<std::string, std::string> rest = ba.identity.decides;
  rest["source order"] = "a, b";
  EXPECT_EQ(rest, ab.identity.decides);
  // One source trains as [data] alone, whose identity has no order.
  job_.data_sources = {a};
  EXPECT_EQ(load_job_data(job_, kModel, kTokenizer, single_rank()).identity.decides.count("source order"), 0u);
}

TEST_F(JobDataTest, TooFewSamplesForOneGlobalBatchAreRefusedNamingTheFileAndTheBatch) {
  const ModelTokens model = kModel;
  DataContext many = single_rank();
  many.world_size = 512;
  try {
    load_job_data(job_, model, kTokenizer, many);
    FAIL() << "no error";
  } catch (const common::Error& e) {
    EXPECT_EQ(e.kind(), common::ErrorKind::kConfig);
    EXPECT_NE(std::string(e.what()).find(job_.data.train_file), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("fewer than one global batch of 1024 (2 per rank x 512 ranks x 1"),
              std::string::npos)
        << e.what();
  }
  // A tokenizer larger than the model's vocabulary is another model's.
  EXPECT_THROW(load_job_data(job_, {100, 556, {557}}, kTokenizer, single_rank()), common::Error);
}

}  // namespace
}  // namespace shardtune::data
