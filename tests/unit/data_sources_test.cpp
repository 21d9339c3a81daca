// [[data.sources]] in the job file: keys inherited from [data], the resolved job's round trip, and
// every refusal named by source and key.
#include <gtest/gtest.h>

#include "common/job/job_loader.h"
#include "common/job/job_writer.h"

namespace shardtune::job {
namespace {

constexpr const char* kJob = R"([job]
name = "t"
[model]
preset = "tiny"
init = "random"
[data]
tokenizer = "tok.json"
format = "alpaca"
val_fraction = 0.1
)";

std::string errors(const std::string& sources) {
  const LoadedJob loaded = parse_job(std::string(kJob) + sources, "job.toml", {});
  EXPECT_TRUE(loaded.diagnostics.has_errors()) << sources;
  return loaded.diagnostics.to_string();
}

TEST(DataSources, EntriesTakeTheirOwnKeysAndInheritTheRestFromData) {
  const LoadedJob loaded = parse_job(std::string(kJob) + R"(
[[data.sources]]
name = "chat"
format = "chat"
train_file = "chat.jsonl"
weight = 7
[[data.sources]]
train_file = "/data/code-set.json"
weight = 2.5
val_fraction = 0.0
)",
                                     "job.toml", {});
  ASSERT_FALSE(loaded.diagnostics.has_errors()) << loaded.diagnostics.to_string();
  const std::vector<DataSource> s = data_sources(loaded.job);
  ASSERT_EQ(s.size(), 2u);
  EXPECT_EQ(s[0].name, "chat");
  EXPECT_EQ(s[0].weight, 7.0);
  EXPECT_EQ(s[0].data.format, DataFormat::kChat);
  EXPECT_EQ(s[0].data.val_fraction, 0.1);  // [data]'s
  EXPECT_EQ(s[1].name, "code-set");         // the file's name
  EXPECT_EQ(s[1].data.format, DataFormat::kAlpaca);
  EXPECT_EQ(s[1].data.val_fraction, 0.0);
  EXPECT_EQ(loaded.sources.at("data.sources[2].weight").line, 18);
  // The resolved job reads back to the same sources, without a warning.
  const LoadedJob again = parse_job(to_toml(loaded.job), "resolved.toml", {});
  ASSERT_FALSE(again.diagnostics.has_errors()) << again.diagnostics.to_string() << to_toml(loaded.job);
  EXPECT_TRUE(again.diagnostics.to_string().find("no effect") == std::string::npos) << again.diagnostics.to_string();
  const std::vector<DataSource> t = data_sources(again.job);
  ASSERT_EQ(t.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(t[i].name, s[i].name);
    EXPECT_EQ(t[i].weight, s[i].weight);
    EXPECT_EQ(t[i].data.train_file, s[i].data.train_file);
    EXPECT_EQ(t[i].data.format, s[i].data.format);
    EXPECT_EQ(t[i].data.val_fraction, s[i].data.val_fraction);
  }
}

TEST(DataSources, AFileNameBecomesANameOfSafeCharacters) {
  const LoadedJob loaded =
      parse_job(std::string(kJob) + "\n[[data.sources]]\ntrain_file = \"/d/my set \\\"v2\\\".json\"\n", "job.toml", {});
  ASSERT_FALSE(loaded.diagnostics.has_errors()) << loaded.diagnostics.to_string();
  EXPECT_EQ(data_sources(loaded.job)[0].name, "my_set__v2_");
}

TEST(DataSources, WithoutEntriesDataIsTheOneSource) {
  const LoadedJob loaded = parse_job(std::string(kJob) + "train_file = \"a.json\"\n", "job.toml", {});
  ASSERT_FALSE(loaded.diagnostics.has_errors()) << loaded.diagnostics.to_string();
  const std::vector<DataSource> s = data_sources(loaded.job);
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].weight, 1.0);
  EXPECT_EQ(s[0].data.train_file, "a.json");
  EXPECT_TRUE(to_toml(loaded.job).find("[[data.sources]]") == std::string::npos);
}

TEST(DataSources, BadEntriesAreRefusedBySourceAndKey) {
  const std::string one = "\n[[data.sources]]\ntrain_file = \"a.json\"\n";
  EXPECT_NE(errors(one + "weight = 0\n").find("data.sources[1].weight"), std::string::npos);
  EXPECT_NE(errors(one + "weight = -2\n").find("expected a positive, finite number"), std::string::npos);
  EXPECT_NE(errors(one + "weight = \"heavy\"\n").find("data.sources[1].weight"), std::string::npos);
  EXPECT_NE(errors(one + "wieght = 2\n").find("did you mean 'weight'?"), std::string::npos);
  EXPECT_NE(errors(one + "tokenizer = \"t.json\"\n").find("[data] tokenizer is the job's"), std::string::npos);
  EXPECT_NE(errors(one + "samples_per_epoch = 5\n").find("[data] samples_per_epoch is the job's"), std::string::npos);
  EXPECT_NE(errors(one + one).find("two sources are named \"a\""), std::string::npos);
  EXPECT_NE(errors(one + "name = \"a\\\"b\"\n").find("expected a non-empty name of letters"), std::string::npos);
  EXPECT_NE(errors(one + "name = \"\"\n").find("data.sources[1].name"), std::string::npos);
  EXPECT_NE(errors("\n[[data.sources]]\nname = \"x\"\n").find("source \"x\": format \"alpaca\" needs train_file"),
            std::string::npos);
  EXPECT_NE(errors(one + "format = \"synthetic\"\n").find("synthetic data reads no file"), std::string::npos);
  // A key of one format on a source of another.
  const std::string chat = "\n[[data.sources]]\nformat = \"chat\"\ntrain_file = \"c.jsonl\"\n";
  const std::string wrong = errors(chat + "prompt_field = \"question\"\n");
  EXPECT_NE(wrong.find("data.sources[1].prompt_field"), std::string::npos) << wrong;
  EXPECT_NE(wrong.find("prompt_field = \"question\" has no effect: format is \"chat\""), std::string::npos) << wrong;
  EXPECT_NE(errors(one + "chat_format = \"llama2\"\n").find("source \"a\": chat_format"), std::string::npos);
  EXPECT_NE(errors(one + "val_fraction = 1.5\n").find("data.sources[1].val_fraction"), std::string::npos);
  EXPECT_NE(errors(one + "prompt_template = \"{open\"\n").find("data.sources[1].prompt_template"), std::string::npos);
  // Pairs do not mix with other records; [data] files do not go with sources.
  EXPECT_NE(errors(one + "\n[[data.sources]]\nformat = \"preference\"\ntrain_file = \"p.jsonl\"\n")
                .find("preference pairs do not mix with other records"),
            std::string::npos);
  EXPECT_NE(errors("train_file = \"x.json\"\n" + one).find("[data] train_file and [[data.sources]] exclude each other"),
            std::string::npos);
  EXPECT_NE(errors("\n[data.sources]\ntrain_file = \"a.json\"\n").find("one [[data.sources]] per source"),
            std::string::npos);
}

// [data]'s own value reaches the sources that do not set theirs (and a key that is the job's, every
// source): where none of those reads it, it has no effect, as it would without sources.
TEST(DataSources, ADataValueNoSourceItReachesReadsHasNoEffect) {
  // What validation says of a job it accepts.
  auto said = [](const std::string& rest) {
    const LoadedJob loaded = parse_job(std::string(kJob) + rest, "job.toml", {});
    EXPECT_FALSE(loaded.diagnostics.has_errors()) << loaded.diagnostics.to_string();
    return loaded.diagnostics.to_string();
  };
  const std::string alpaca = "\n[[data.sources]]\ntrain_file = \"a.json\"\n";
  const std::string jsonl = "\n[[data.sources]]\nformat = \"jsonl\"\ntrain_file = \"b.jsonl\"\n";
  const std::string unread = said("prompt_field = \"q\"\n" + alpaca);
  EXPECT_NE(unread.find("prompt_field = \"q\" has no effect: no source it reaches reads it (source \"a\": format is "
                        "\"alpaca\""),
            std::string::npos)
      << unread;
  // A jsonl source takes it; one that sets its own does not.
  EXPECT_EQ(said("prompt_field = \"q\"\n" + alpaca + jsonl).find("has no effect"), std::string::npos);
  const std::string own = said("prompt_field = \"q\"\n" + alpaca + jsonl + "prompt_field = \"p\"\n");
  EXPECT_NE(own.find("prompt_field = \"q\" has no effect"), std::string::npos) << own;
  // long_examples is the job's: every source takes it, and padding cuts every source's examples.
  const std::string padded = said("long_examples = \"truncate\"\n[train]\nbatching_strategy = \"padding\"\n" + alpaca);
  EXPECT_NE(padded.find("long_examples = \"truncate\" has no effect"), std::string::npos) << padded;
  EXPECT_EQ(said("long_examples = \"truncate\"\n" + alpaca).find("has no effect"), std::string::npos);
}

// A preference source, like [data], trains the answers alone: train_on = "all" would put the
// prompt's tokens in DPO's log-probabilities.
TEST(DataSources, APreferenceSourceMayNotTrainOnThePrompt) {
  const std::string dpo = R"([job]
name = "t"
[model]
preset = "tiny"
init = "random"
[train]
objective = "dpo"
batching_strategy = "padding"
[data]
tokenizer = "tok.json"
[[data.sources]]
format = "preference"
train_file = "a.jsonl"
[[data.sources]]
format = "preference"
train_file = "b.jsonl"
)";
  const LoadedJob fine = parse_job(dpo, "job.toml", {});
  ASSERT_FALSE(fine.diagnostics.has_errors()) << fine.diagnostics.to_string();
  const LoadedJob all = parse_job(dpo + "train_on = \"all\"\n", "job.toml", {});
  const std::string e = all.diagnostics.to_string();
  EXPECT_NE(e.find("data.sources[2].train_on"), std::string::npos) << e;
  EXPECT_NE(e.find("DPO compares the log-probabilities of the two answers alone"), std::string::npos) << e;
  EXPECT_EQ(e.find("data.sources[1]"), std::string::npos) << e;
}

}  // namespace
}  // namespace shardtune::job
