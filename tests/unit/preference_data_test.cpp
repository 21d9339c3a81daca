// Preference pairs from files to samples: the three record forms read, every bad one named by
// file:line and field; the truncation rule held as a property over random pairs; and a job's pairs,
// text and conversations, tokenized into a token file of two examples a pair whose prompts are
// equal and whose labels cover the answer alone.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <set>
#include <tuple>

#include "common/error.h"
#include "runtime/data/job_data.h"
#include "runtime/data/job_tokens.h"
#include "runtime/data/preference_dataset.h"
#include "runtime/data/preference_pairs.h"
#include "runtime/data/records.h"
#include "runtime/data/reference_logps_file.h"

namespace shardtune::data {
namespace {

namespace fs = std::filesystem;

fs::path temp_dir() {
  const fs::path dir = fs::temp_directory_path() / fmt::format("shardtune_pairs_{}", ::getpid());
  fs::create_directories(dir);
  return dir;
}

std::string write(const std::string& name, const std::string& text) {
  const std::string path = (temp_dir() / name).string();
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const common::Error& e) {
    return e.what();
  }
  return "";
}

const std::vector<std::string> kText = {"prompt", "chosen", "rejected"};

TEST(PreferenceRecords, TextConversationsAndImplicitPromptsAreRead) {
  const std::string path = write(
      "pairs.jsonl",
      R"({"prompt": "Sky?", "chosen": "Blue.", "rejected": "Green."})" "\n"
      R"({"prompt": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Sky?"}], "chosen": [{"role": "assistant", "content": "Blue."}], "rejected": "Green."})" "\n"
      R"({"chosen": [{"role": "user", "content": "Sky?"}, {"role": "assistant", "content": "Blue."}], "rejected": [{"role": "user", "content": "Sky?"}, {"role": "assistant", "content": "Red."}]})" "\n");
  const RecordFile f = read_preferences(path, kText, {}, false);
  ASSERT_EQ(f.records.size(), 3u);
  EXPECT_TRUE(f.records[0].turns.empty());
  EXPECT_EQ(f.records[0].fields.at("prompt"), "Sky?");
  ASSERT_EQ(f.records[1].turns.size(), 2u);
  EXPECT_EQ(f.records[1].turns[1].content, "Sky?");
  EXPECT_EQ(f.records[1].fields.at("chosen"), "Blue.");
  EXPECT_EQ(f.records[1].fields.at("rejected"), "Green.");
  ASSERT_EQ(f.records[2].turns.size(), 1u);
  EXPECT_EQ(f.records[2].fields.at("rejected"), "Red.");
  EXPECT_EQ(f.records[2].where, path + ":3");
}

TEST(PreferenceRecords, EveryBadPairIsNamedByLineAndWhatIsWrong) {
  const std::vector<std::pair<std::string, std::string>> bad = {
      {R"({"prompt": "Sky?", "chosen": "Blue."})", "no field \"rejected\""},
      {R"({"prompt": "Sky?", "chosen": "Blue.", "rejected": "Blue."})", "the same answer"},
      {R"({"prompt": "Sky?", "chosen": "", "rejected": "Green."})", "field \"chosen\" is empty"},
      {R"({"prompt": "Sky?", "chosen": [{"role": "assistant", "content": "Blue."}], "rejected": "Green."})",
       "\"prompt\" is text, so \"chosen\" must be text too"},
      {R"({"prompt": [{"role": "user", "content": "Sky?"}, {"role": "assistant", "content": "Hm."}], "chosen": "Blue.", "rejected": "Green."})",
       "must end with a user turn"},
      {R"({"prompt": [{"role": "user", "content": "Sky?"}], "chosen": [{"role": "assistant", "content": "Blue."}, {"role": "assistant", "content": "x"}], "rejected": "Green."})",
       "one assistant message"},
      {R"({"prompt": [{"role": "user", "content": "Sky?"}], "chosen": [{"role": "user", "content": "Blue."}], "rejected": "Green."})",
       "role \"assistant\""},
      {R"({"prompt": [{"role": "user", "content": "Sky?"}], "chosen": "  ", "rejected": "Green."})", "\"chosen\" is empty"},
      {R"({"chosen": [{"role": "user", "content": "A?"}, {"role": "assistant", "content": "Blue."}], "rejected": [{"role": "user", "content": "B?"}, {"role": "assistant", "content": "Red."}]})",
       "the same conversation but for their last"},
      {R"({"chosen": "Blue.", "rejected": "Red."})", "no field \"prompt\""},
      {R"({"prompt": 3, "chosen": "Blue.", "rejected": "Red."})", "\"prompt\" must be a string or a list of messages"},
  };
  std::string text = R"({"prompt": "Sky?", "chosen": "Blue.", "rejected": "Green."})" "\n";
  for (const auto& [line, why] : bad) text += line + "\n";
  const std::string path = write("bad.jsonl", text);
  for (size_t i = 0; i < bad.size(); ++i) {
    const std::string one = write("one.jsonl", bad[i].first + "\n");
    const std::string e = error_of([&] { read_preferences(one, kText, {}, false); });
    EXPECT_NE(e.find(one + ":1: "), std::string::npos) << e;
    EXPECT_NE(e.find(bad[i].second), std::string::npos) << bad[i].first << "\n" << e;
  }
  const RecordFile f = read_preferences(path, kText, {}, true);
  EXPECT_EQ(f.records.size(), 1u);
  EXPECT_EQ(f.skipped, static_cast<int64_t>(bad.size()));
  // Text pairs may also be CSV rows, held to the same rules.
  const std::string csv = write("pairs.csv", "prompt,chosen,rejected\nSky?,Blue.,Green.\nGrass?,Green.,Green.\n");
  const std::string e = error_of([&] { read_preferences(csv, kText, {}, false); });
  EXPECT_NE(e.find(csv + ":3: chosen and rejected are the same answer"), std::string::npos) << e;
  EXPECT_EQ(read_preferences(csv, kText, {}, true).records.size(), 1u);
}

// An example of `prompt` tokens (the first BOS = 1 when `bos`) and `answer` learned tokens.
Example example(int prompt, int answer, int salt, bool bos) {
  Example e;
  for (int i = 0; i < prompt; ++i) {
    e.ids.push_back(i == 0 && bos ? 1 : 100 + i);
    e.labels.push_back(kIgnoreLabel);
  }
  for (int i = 0; i < answer; ++i) {
    e.ids.push_back(1000 * salt + i);
    e.labels.push_back(1000 * salt + i);
  }
  return e;
}

TEST(PreferencePairs, TruncationCutsThePromptsStartFirstThenTheAnswersEnds) {
  std::mt19937_64 rng(5);
  for (int trial = 0; trial < 5000; ++trial) {
    const bool bos = trial % 3 != 0;
    const int p = 1 + static_cast<int>(rng() % 40), a = 1 + static_cast<int>(rng() % 40), b = 1 + static_cast<int>(rng() % 40);
    const int64_t limit = 2 + static_cast<int64_t>(rng() % 70);
    Example c = example(p, a, 1, bos), r = example(p, b, 2, bos);
    const Example c0 = c, r0 = r;
    const bool cut = truncate_pair(c, r, limit, bos ? 1 : -1);
    SCOPED_TRACE(fmt::format("prompt {}, answers {} and {}, limit {}", p, a, b, limit));
    const int64_t longest = std::max(p + a, p + b);
    EXPECT_EQ(cut, longest > limit);
    if (!cut) {
      EXPECT_EQ(c.ids, c0.ids);
      EXPECT_EQ(r.ids, r0.ids);
      continue;
    }
    EXPECT_LE(static_cast<int64_t>(std::max(c.ids.size(), r.ids.size())), limit);
    // Both keep one prompt: its BOS and its last tokens, as many as the answers leave room for, and
    // never fewer than half the limit (or the whole prompt when it is shorter).
    const int64_t kept = prompt_length(c);
    EXPECT_EQ(prompt_length(r), kept);
    EXPECT_TRUE(std::equal(c.ids.begin(), c.ids.begin() + kept, r.ids.begin()));
    const int64_t expect_kept = std::min<int64_t>(p, std::max<int64_t>(limit - std::max(a, b), std::min<int64_t>(p, limit / 2)));
    EXPECT_EQ(kept, expect_kept);
    if (bos && kept > 0) EXPECT_EQ(c.ids[0], 1);
    const int64_t tail_from = bos && kept > 0 ? 1 : 0;
    for (int64_t i = tail_from; i < kept; ++i) EXPECT_EQ(c.ids[i], c0.ids[p - kept + i]) << "the prompt keeps its end";
    // Each answer keeps its start, all of it that fits.
    for (const auto& [e, e0, n] : {std::tuple{&c, &c0, a}, std::tuple{&r, &r0, b}}) {
      const int64_t answer = static_cast<int64_t>(e->ids.size()) - kept;
      EXPECT_EQ(answer, std::min<int64_t>(n, limit - kept));
      EXPECT_GE(answer, 1);
      EXPECT_TRUE(std::equal(e->ids.begin() + kept, e->ids.end(), e0->ids.begin() + p));
      EXPECT_EQ(e->labels.size(), e->ids.size());
    }
  }
}

TEST(PreferencePairs, OnlyTheLastAssistantTurnIsLearned) {
  const std::vector<ChatPiece> pieces = {{"a", false, false}, {"b", false, true}, {"c", true, true},
                                         {"d", false, false}, {"e", false, true}, {"f", true, true}};
  const std::vector<ChatPiece> out = learn_last_turn(pieces);
  std::vector<bool> learned;
  for (const ChatPiece& p : out) learned.push_back(p.learned);
  EXPECT_EQ(learned, (std::vector<bool>{false, false, false, false, true, true}));
}

TEST(ReferenceLogpsFile, ValuesComeBackExactlyAndAnyDamageOrOtherKeyIsRefusedNamingTheFile) {
  const std::string dir = (temp_dir() / "logps").string();
  const std::string key = "pairs 3 of tokens 0123; reference the base";
  const std::string path = reference_logps_path(dir, "training", key);
  EXPECT_NE(path, reference_logps_path(dir, "training", key + "!"));
  EXPECT_FALSE(read_reference_logps(path, key, 3).has_value());
  const std::vector<double> values = {-1.5, -2.25, -3.0e-7, -41.0, -0.1, -1e10};
  write_reference_logps(path, key, values);
  EXPECT_EQ(*read_reference_logps(path, key, 3), values);
  EXPECT_NE(error_of([&] { read_reference_logps(path, key + " changed", 3); }).find(path + ": made for other pairs"),
            std::string::npos);
  EXPECT_NE(error_of([&] { read_reference_logps(path, key, 4); }).find(path + ": holds values: 6"), std::string::npos);
  const std::string bytes = [&] {
    std::ifstream in(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }();
  for (size_t at : {bytes.size() - 1, bytes.size() - 20, size_t{3}}) {
    std::string damaged = bytes;
    damaged[at] ^= 0x10;
    std::ofstream(path, std::ios::binary) << damaged;
    const std::string e = error_of([&] { read_reference_logps(path, key, 3); });
    EXPECT_NE(e.find(path + ":"), std::string::npos) << "damage at byte " << at << ": " << e;
  }
  std::ofstream(path, std::ios::binary) << bytes.substr(0, bytes.size() - 8);
  EXPECT_NE(error_of([&] { read_reference_logps(path, key, 3); }).find("cut short or damaged"), std::string::npos);
}

// A job's pairs through the tiny chat tokenizer (Llama 3.1's chat format from its template).
class PreferenceJobTest : public testing::Test {
 protected:
  void SetUp() override {
    job_.job.output_dir = (temp_dir() / "out").string();
    job_.data.format = job::DataFormat::kPreference;
    job_.data.tokenizer = std::string(ST_SOURCE_DIR) + "/configs/data/tiny-chat-tokenizer/tokenizer.json";
    job_.train.objective = job::Objective::kDpo;
    job_.train.batching_strategy = job::BatchingStrategy::kPadding;
    job_.train.context_length = 64;
    job_.train.batch_size_training = 2;
    job_.train.run_validation = false;
  }
  std::unique_ptr<Dataset> load(const std::string& records) {
    job_.data.train_file = write(fmt::format("job-{}.jsonl", counter_++), records);
    const Tokenizer tokenizer = Tokenizer::from_file(job_.data.tokenizer);
    const ModelTokens model{tokenizer.vocab_size(), -1, {}};
    return std::move(load_job_data(job_, model, job_.data.tokenizer, single_rank()).train);
  }
  job::Job job_;
  static inline int counter_ = 0;
};

TEST_F(PreferenceJobTest, PairsBecomeTwoSequencesOfOnePromptWithTheAnswerAloneLearned) {
  std::string text;
  for (int i = 0; i < 6; ++i) {
    text += fmt::format(R"({{"prompt": "What is {} plus one?", "chosen": "It is {}.", "rejected": "It is seven."}})", i,
                        i + 1) + "\n";
    text += fmt::format(R"({{"prompt": [{{"role": "user", "content": "What is {} plus one?"}}], "chosen": "It is {}.", "rejected": "It is seven."}})",
                        i, i + 1) + "\n";
  }
  const std::unique_ptr<Dataset> pairs = load(text);
  ASSERT_EQ(pairs->size(), 12);
  for (int64_t i = 0; i < pairs->size(); ++i) {
    const Sample s = pairs->get(i);
    ASSERT_TRUE(s.is_pair());
    auto prompt = [](const std::vector<int64_t>& labels) {
      return std::find_if(labels.begin(), labels.end(), [](int64_t l) { return l != kIgnoreLabel; }) - labels.begin();
    };
    const int64_t p = prompt(s.labels);
    EXPECT_EQ(prompt(s.rejected_labels), p);
    EXPECT_GT(p, 3);
    EXPECT_TRUE(std::equal(s.input_ids.begin(), s.input_ids.begin() + p, s.rejected_input_ids.begin()));
    // Every token after the prompt is learned: the answer and the token that ends it.
    for (size_t t = static_cast<size_t>(p); t < s.labels.size(); ++t) EXPECT_EQ(s.labels[t], s.input_ids[t]);
    EXPECT_NE(s.input_ids, s.rejected_input_ids);
  }
  // The conversational pairs end with <|eot_id|> (their turn's end), the text pairs with the
  // tokenizer's EOS, which is <|eot_id|> too.
  const Tokenizer tokenizer = Tokenizer::from_file(job_.data.tokenizer);
  for (int64_t i = 0; i < pairs->size(); ++i) {
    EXPECT_EQ(pairs->get(i).input_ids.back(), *tokenizer.token_to_id("<|eot_id|>"));
    EXPECT_EQ(pairs->get(i).rejected_input_ids.back(), *tokenizer.token_to_id("<|eot_id|>"));
  }
}

TEST_F(PreferenceJobTest, LongPairsAreCutByTheRuleAndReported) {
  job_.train.context_length = 24;
  std::string text;
  const std::string words = "one two three four five six seven eight nine ten eleven twelve thirteen fourteen";
  for (int i = 0; i < 4; ++i)
    text += fmt::format(R"({{"prompt": "{} {}", "chosen": "Yes {}.", "rejected": "No, {}."}})", words, i, i, words) + "\n";
  const std::unique_ptr<Dataset> pairs = load(text);
  ASSERT_EQ(pairs->size(), 4);
  for (int64_t i = 0; i < 4; ++i) {
    const Sample s = pairs->get(i);
    EXPECT_LE(s.input_ids.size(), 24u);
    EXPECT_LE(s.rejected_input_ids.size(), 24u);
    EXPECT_EQ(s.rejected_input_ids.size(), 24u) << "the long rejected answer fills the context";
  }
}

}  // namespace
}  // namespace shardtune::data
