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

}  // namespace
}  // namespace shardtune::job
