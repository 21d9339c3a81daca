// Data files, prompts and packing on hand-made inputs: every bad record named by file:line,
// skipped or fatal as configured; prompt tokens masked; positions restarting per example.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "common/error.h"
#include "runtime/data/chat.h"
#include "runtime/data/packed_rows.h"
#include "runtime/data/token_file.h"
#include "runtime/data/tokenizer.h"
#include "runtime/data/records.h"
#include "runtime/data/sft_examples.h"
#include "runtime/data/utf8.h"
#include "error_text.h"
#include "tests/unit/packing_reference.h"

namespace shardtune::data {
namespace {

std::string write(const std::string& name, const std::string& text) {
  const auto dir = std::filesystem::temp_directory_path() / "shardtune_data_test";
  std::filesystem::create_directories(dir);
  const std::string path = (dir / name).string();
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

using testing_support::error_of;

TEST(Records, JsonArrayRecordsKnowTheirLines) {
  const std::string path = write("a.json",
                                 "[\n  {\"instruction\": \"Add\", \"input\": \"\", \"output\": \"2\"},\n"
                                 "  {\"instruction\": \"Sub\",\n   \"input\": \"x\", \"output\": 3}\n]\n");
  const RecordFile f = read_records(path, {"instruction", "input", "output"}, {"input"}, false);
  ASSERT_EQ(f.records.size(), 2u);
  EXPECT_EQ(f.records[0].where, path + ":2");
  EXPECT_EQ(f.records[1].where, path + ":3");
  EXPECT_EQ(f.records[1].fields.at("output"), "3");
}

TEST(Records, BadJsonLinesAreNamedAndEitherStopOrAreSkipped) {
  const std::string path = write("b.jsonl",
                                 "{\"prompt\": \"a\", \"response\": \"b\"}\n"
                                 "{\"prompt\": \"a\", \"response\": \n"        // line 2: malformed
                                 "{\"prompt\": \"a\"}\n"                       // line 3: missing field
                                 "{\"prompt\": \"a\", \"response\": \"\"}\n"   // line 4: empty response
                                 "{\"prompt\": \"\xff\", \"response\": \"b\"}\n"  // line 5: not UTF-8
                                 "\n"
                                 "[1, 2]\n"                                    // line 7: not an object
                                 "{\"prompt\": \"c\", \"response\": \"d\"}\n");
  const std::string error = error_of([&] { read_records(path, {"prompt", "response"}, {}, false); });
  EXPECT_NE(error.find(path + ":2: not valid JSON"), std::string::npos) << error;
  EXPECT_NE(error.find("on_bad_record = \"skip\""), std::string::npos) << error;
  const RecordFile f = read_records(path, {"prompt", "response"}, {}, true);
  ASSERT_EQ(f.records.size(), 2u);
  EXPECT_EQ(f.records[1].where, path + ":8");
  EXPECT_EQ(f.skipped, 5);
  ASSERT_EQ(f.skip_reasons.size(), 5u);
  EXPECT_NE(f.skip_reasons[1].find(":3: no field \"response\""), std::string::npos);
  EXPECT_NE(f.skip_reasons[2].find(":4: field \"response\" is empty"), std::string::npos);
  EXPECT_NE(f.skip_reasons[3].find(":5: the line is not UTF-8"), std::string::npos);
  EXPECT_NE(f.skip_reasons[4].find(":7: a record must be a JSON object"), std::string::npos);
}

// A number past double's range (nlohmann throws out_of_range, not parse_error) and nesting deeper
// than any record needs are bad records like any other: named, and skipped when asked.
TEST(Records, NumbersOutOfRangeAndDeepNestingAreBadRecords) {
  const std::string deep = "{\"prompt\": " + std::string(100000, '[') + std::string(100000, ']') + ", \"response\": \"b\"}";
  const std::string path = write("c.jsonl",
                                 "{\"prompt\": \"a\", \"response\": \"b\"}\n"
                                 "{\"prompt\": 1e400, \"response\": \"b\"}\n" +
                                     deep + "\n{\"prompt\": \"c\", \"response\": \"d\"}\n");
  const std::string error = error_of([&] { read_records(path, {"prompt", "response"}, {}, false); });
  EXPECT_NE(error.find(path + ":2: not valid JSON"), std::string::npos) << error;
  const RecordFile f = read_records(path, {"prompt", "response"}, {}, true);
  ASSERT_EQ(f.records.size(), 2u);
  ASSERT_EQ(f.skip_reasons.size(), 2u);
  EXPECT_NE(f.skip_reasons[0].find(":2: not valid JSON"), std::string::npos) << f.skip_reasons[0];
  EXPECT_NE(f.skip_reasons[1].find(":3: nested more than 64 deep"), std::string::npos) << f.skip_reasons[1];
  const std::string array = write("c.json", "[{\"prompt\": \"a\", \"response\": 2e999}]");
  const std::string e2 = error_of([&] { read_records(array, {"prompt", "response"}, {}, true); });
  EXPECT_NE(e2.find(array + ": not valid JSON"), std::string::npos) << e2;
  const std::string nested = write("d.json", "[" + std::string(100000, '[') + std::string(100000, ']') + "]");
  const std::string e3 = error_of([&] { read_records(nested, {"prompt", "response"}, {}, true); });
  EXPECT_NE(e3.find(nested + ": nested more than 64 deep"), std::string::npos) << e3;
}

TEST(Records, CsvFollowsRfc4180) {
  const auto rows = parse_csv("input,target\n\"a, \"\"quoted\"\"\nline\",b\r\nc,d\n\ne,f", "x.csv");
  ASSERT_EQ(rows.size(), 4u);
  EXPECT_EQ(rows[1].first, 2);
  EXPECT_EQ(rows[1].second, (std::vector<std::string>{"a, \"quoted\"\nline", "b"}));
  EXPECT_EQ(rows[2].first, 4);
  EXPECT_EQ(rows[3].second, (std::vector<std::string>{"e", "f"}));
  EXPECT_NE(error_of([] { parse_csv("a,b\n\"open,c\n", "y.csv"); }).find("y.csv:2: a quoted CSV field is never closed"),
            std::string::npos);
  const std::string path = write("g.csv", "input,target\nfoo,bar\nonly-one\n");
  EXPECT_NE(error_of([&] { read_records(path, {"input", "target"}, {}, false); }).find(":3: 1 field(s), the header has 2"),
            std::string::npos);
}

// A key twice in one record: JSON parsers keep the last silently; here the record is named as bad.
TEST(Records, RepeatedKeysAreBadRecordsInJsonAndJsonLines) {
  const std::string array = write("dup.json",
                                  "[\n  {\"prompt\": \"a\", \"response\": \"b\"},\n"
                                  "  {\"prompt\": \"a\", \"response\": \"b\", \"prompt\": \"c\"},\n"
                                  "  {\"prompt\": \"d\", \"response\": \"e\"}\n]\n");
  EXPECT_TRUE(testing_support::has(error_of([&] { read_records(array, {"prompt", "response"}, {}, false); }),
                                   array + ":3: the key \"prompt\" appears twice"));
  const RecordFile a = read_records(array, {"prompt", "response"}, {}, true);
  ASSERT_EQ(a.records.size(), 2u);
  EXPECT_EQ(a.records[1].where, array + ":4");
  const std::string lines = write("dup.jsonl", "{\"prompt\": \"a\", \"response\": \"b\", \"response\": \"x\"}\n");
  EXPECT_TRUE(testing_support::has(error_of([&] { read_records(lines, {"prompt", "response"}, {}, false); }),
                                   lines + ":1: the key \"response\" appears twice"));
}

TEST(Records, RepeatedCsvHeaderNamesAreRefusedAndAByteOrderMarkIsNotPartOfTheFirstColumn) {
  const std::string dup = write("dup.csv", "input,target,input\na,b,c\n");
  EXPECT_TRUE(testing_support::has(error_of([&] { read_records(dup, {"input", "target"}, {}, false); }),
                                   dup + ":1: the header names the column \"input\" twice"));
  const std::string bom = write("bom.csv", "\xEF\xBB\xBFinput,target\nx,y\n");
  const RecordFile f = read_records(bom, {"input", "target"}, {}, false);
  ASSERT_EQ(f.records.size(), 1u);
  EXPECT_EQ(f.records[0].fields.at("input"), "x");
  EXPECT_EQ(f.records[0].where, bom + ":2");
  const std::string bom_json = write("bom.jsonl", "\xEF\xBB\xBF{\"prompt\": \"a\", \"response\": \"b\"}\n");
  EXPECT_EQ(read_records(bom_json, {"prompt", "response"}, {}, false).records.size(), 1u);
}

// One bad byte used to fail a whole JSON array, whatever on_bad_record said, and reached the log raw.
TEST(Records, NotUtf8RecordsOfAJsonArrayAreNamedAndSkippedAndNeverPrintedRaw) {
  const std::string path = write("not_utf8.json",
                                 "[\n  {\"instruction\": \"a\", \"input\": \"\", \"output\": \"b\"},\n"
                                 "  {\"instruction\": \"x\xff\", \"input\": \"\",\n   \"output\": \"y\"},\n"
                                 "  {\"instruction\": \"c\", \"input\": \"\", \"output\": \"d\"}\n]\n");
  const std::vector<std::string> fields = {"instruction", "input", "output"};
  const std::string error = error_of([&] { read_records(path, fields, {"input"}, false); });
  EXPECT_NE(error.find(path + ":3: the record is not UTF-8 (byte \\xFF on line 3)"), std::string::npos) << error;
  EXPECT_TRUE(is_valid_utf8(error)) << error;
  const RecordFile f = read_records(path, fields, {"input"}, true);
  ASSERT_EQ(f.records.size(), 2u);
  EXPECT_EQ(f.skipped, 1);
  EXPECT_EQ(f.records[1].where, path + ":5");
  EXPECT_EQ(f.records[1].fields.at("output"), "d");
  // A bad byte outside every record is the file's syntax, named escaped.
  const std::string outside = write("not_utf8_outside.json", "[\n  {\"output\": \"b\"}\xfe\n]\n");
  const std::string syntax = error_of([&] { read_records(outside, {"output"}, {}, true); });
  EXPECT_NE(syntax.find(outside + ":2: not valid JSON"), std::string::npos) << syntax;
  EXPECT_TRUE(is_valid_utf8(syntax)) << syntax;
  // A CSV header's bad bytes are quoted, not copied.
  const std::string csv = write("not_utf8.csv", "input,tar\xffget\nhe go,he goes\n");
  const RecordFile rows = read_records(csv, {"input"}, {}, true);
  ASSERT_EQ(rows.skip_reasons.size(), 1u);
  EXPECT_TRUE(is_valid_utf8(rows.skip_reasons[0])) << rows.skip_reasons[0];
}

TEST(Conversations, BothShapesAreReadAndEveryBadOneIsNamedByLineAndTurn) {
  const std::string path = write(
      "c.jsonl",
      "{\"messages\": [{\"role\": \"system\", \"content\": \"\"}, {\"role\": \"user\", \"content\": \"hi\"}, "
      "{\"role\": \"assistant\", \"content\": \"yo\"}]}\n"                                       // 1: good
      "{\"conversations\": [{\"from\": \"human\", \"value\": \"q\"}, {\"from\": \"gpt\", \"value\": \"a\"}]}\n"  // 2: good
      "{\"messages\": [{\"role\": \"user\", \"content\": \"q\"}, {\"role\": \"tool\", \"content\": \"x\"}]}\n"  // 3
      "{\"messages\": [{\"role\": \"user\", \"content\": \"only a question\"}]}\n"                     // 4
      "{\"messages\": [{\"role\": \"user\", \"content\": [\"a\"]}, {\"role\": \"assistant\", \"content\": \"b\"}]}\n"  // 5
      "{\"messages\": [{\"role\": \"assistant\", \"content\": \"a\"}, {\"role\": \"user\", \"content\": \"b\"}]}\n"  // 6
      "{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}, {\"role\": \"system\", \"content\": \"b\"}]}\n"  // 7
      "{\"prompt\": \"a\", \"response\": \"b\"}\n"                                                     // 8
      "{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}, {\"role\": \"assistant\", \"content\": \" \\n\"}]}\n"  // 9
      "{\"messages\": [], \"conversations\": []}\n"                                                        // 10
      "{\"messages\": [{\"role\": \"user\", \"content\": null}, {\"role\": \"assistant\", \"content\": \"b\"}]}\n"  // 11
      "{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}, {\"role\": \"assistant\", \"content\": \"b\"}, "
      "{\"role\": \"assistant\", \"content\": \"c\"}]}\n"                                              // 12
      "{\"messages\": [{\"role\": \"user\", \"content\": \"\u00a0\u3000\u2003\"}, {\"role\": \"assistant\", "
      "\"content\": \"b\"}]}\n"                                                                         // 13
      "{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}, {\"role\": \"user\", \"content\": \"b\"}]}\n"  // 14
      "{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}, {\"role\": \"assistant\", \"content\": \"\", "
      "\"tool_calls\": [{\"type\": \"function\", \"function\": {\"name\": \"f\", \"arguments\": {}}}]}]}\n"  // 15
      "{\"messages\": [{\"role\": \"user\", \"content\": \"q\", \"tool_calls\": []}, {\"role\": \"assistant\", "
      "\"content\": \"a\", \"tool_calls\": null}]}\n");  // 16: good (no calls)
  const RecordFile f = read_conversations(path, true);
  ASSERT_EQ(f.records.size(), 3u);
  EXPECT_EQ(f.records[0].turns, (std::vector<Turn>{{"system", ""}, {"user", "hi"}, {"assistant", "yo"}}));
  EXPECT_EQ(f.records[2].turns, (std::vector<Turn>{{"user", "q"}, {"assistant", "a"}}));
  EXPECT_EQ(f.records[1].turns, (std::vector<Turn>{{"user", "q"}, {"assistant", "a"}}));
  EXPECT_EQ(f.records[1].where, path + ":2");
  EXPECT_EQ(f.skipped, 13);
  // Each bad record stops a job that does not skip, with its line and what is wrong in it.
  const std::vector<std::pair<int, std::string>> bad = {
      {3, "messages[1]: unknown role \"tool\" (known: system, user, assistant)"},
      {4, "a conversation without an assistant turn"},
      {5, "messages[0]: \"content\" must be a string, not array"},
      {6, "messages[0]: an assistant turn where a user turn belongs"},
      {7, "messages[1]: a system turn may only come first"},
      {8, "no \"messages\" (OpenAI style) or \"conversations\" (ShareGPT style) field"},
      {9, "messages[1]: the assistant turn is empty"},
      {10, "the record holds both \"messages\" and \"conversations\""},
      {11, "messages[0]: \"content\" must be a string, not null"},
      {12, "messages[2]: an assistant turn where a user turn belongs"},
      {13, "messages[0]: the user turn is empty (nothing but white space)"},  // no-break and ideographic spaces
      {14, "messages[1]: a user turn where an assistant turn belongs"},
      {15, "messages[1] holds \"tool_calls\", which Meta's chat templates render and shardtune's chat formats do "
           "not"},
  };
  const std::string good = "{\"messages\": [{\"role\": \"user\", \"content\": \"q\"}, "
                           "{\"role\": \"assistant\", \"content\": \"a\"}]}\n";
  std::ifstream in(path);
  std::vector<std::string> all;
  for (std::string l; std::getline(in, l);) all.push_back(l);
  for (const auto& [line, why] : bad) {
    const std::string one = write("one.jsonl", good + all[static_cast<size_t>(line - 1)] + "\n");
    const std::string error = error_of([&] { read_conversations(one, false); });
    EXPECT_NE(error.find(one + ":2: " + why), std::string::npos) << "line " << line << ": " << error;
  }
  // ShareGPT's own role names, and a JSON array.
  const std::string sharegpt = write("s.json", "[\n{\"conversations\": [{\"from\": \"human\", \"value\": \"q\"}, "
                                               "{\"from\": \"bot\", \"value\": \"a\"}]}\n]\n");
  EXPECT_NE(error_of([&] { read_conversations(sharegpt, false); })
                .find(sharegpt + ":2: conversations[1]: unknown role \"bot\" (known: system, human, gpt, user, assistant)"),
            std::string::npos);
  const std::string csv = write("c.csv", "messages\nx\n");
  EXPECT_NE(error_of([&] { read_conversations(csv, false); }).find(csv + ": chat data is JSON"), std::string::npos);
}

TEST(Chat, PythonStripRemovesWhatStrStripRemovesAndNothingElse) {
  // str.isspace(): ASCII whitespace, U+001C..U+001F, U+0085, U+00A0, U+1680, U+2000..U+200A,
  // U+2028, U+2029, U+202F, U+205F, U+3000. Not U+200B (zero width space) or U+FEFF.
  EXPECT_EQ(python_strip(" \t\n\v\f\r\x1c\x1f x y \r\n"), "x y");
  EXPECT_EQ(python_strip("\u00a0\u3000\u2003\u2028x\u0085\u202f\u205f\u1680\u2029"), "x");
  EXPECT_EQ(python_strip("\u200bx\ufeff"), "\u200bx\ufeff");
  EXPECT_EQ(python_strip("   "), "");
  EXPECT_EQ(python_strip(""), "");
  EXPECT_EQ(python_strip("\u00e9 \u00e9"), "\u00e9 \u00e9");
}

TEST(Utf8, EscapedKeepsValidTextAndNamesEveryOtherByte) {
  EXPECT_EQ(escaped("caf\xc3\xa9 ok"), "caf\xc3\xa9 ok");
  EXPECT_EQ(escaped("a\nb\tc\x01"), "a\\nb\\tc\\x01");
  EXPECT_EQ(escaped("x\xff\xe2\x82y"), "x\\xFF\\xE2\\x82y");
  EXPECT_EQ(first_invalid_utf8("ab\xc3\xa9\xffz"), 4u);
  EXPECT_EQ(first_invalid_utf8("fine"), std::string_view::npos);
}

TEST(Prompts, TemplatesFillFieldsAndFormatsPickTheirs) {
  Record r{{{"instruction", "Add 2 and 3"}, {"input", ""}, {"output", "5"}}, "f.json:4"};
  EXPECT_EQ(fill_template("Q: {instruction} {{literal}}", r), "Q: Add 2 and 3 {literal}");
  EXPECT_NE(error_of([&] { fill_template("{missing}", r); }).find("f.json:4: the prompt template uses {missing}"),
            std::string::npos);
  job::DataSection d;
  d.format = job::DataFormat::kAlpaca;
  const PromptFormat alpaca = prompt_format(d);
  EXPECT_EQ(alpaca.response_field, "output");
  EXPECT_NE(alpaca.prompt(r).find("### Instruction:\nAdd 2 and 3\n\n### Response:\n"), std::string::npos);
  EXPECT_EQ(alpaca.prompt(r).find("### Input:"), std::string::npos);
  r.fields["input"] = "ctx";
  EXPECT_NE(alpaca.prompt(r).find("### Input:\nctx\n\n### Response:\n"), std::string::npos);
  // A template names the prompt's fields: prompt_field (left at its default here) is not needed.
  d.format = job::DataFormat::kJsonl;
  d.response_field = "a";
  d.prompt_template = "Question: {question}\nAnswer: ";
  const PromptFormat custom = prompt_format(d);
  EXPECT_EQ(custom.required, (std::vector<std::string>{"question", "a"}));
  EXPECT_TRUE(custom.may_be_empty.empty());
  EXPECT_EQ(custom.prompt(Record{{{"question", "why"}, {"a", "because"}}, ""}), "Question: why\nAnswer: ");
  // alpaca with a template that leaves out {input}: records need no input field; one that uses it may
  // leave it empty, as alpaca's own prompt does.
  d.format = job::DataFormat::kAlpaca;
  d.prompt_template = "Do: {instruction}";
  EXPECT_EQ(prompt_format(d).required, (std::vector<std::string>{"instruction", "output"}));
  d.prompt_template = "{instruction} / {input}";
  EXPECT_EQ(prompt_format(d).required, (std::vector<std::string>{"instruction", "input", "output"}));
  EXPECT_EQ(prompt_format(d).may_be_empty, (std::vector<std::string>{"input"}));
  d.format = job::DataFormat::kJsonl;
  d.prompt_template.clear();
  d.format = job::DataFormat::kSamsum;
  const PromptFormat samsum = prompt_format(d);
  EXPECT_EQ(samsum.required, (std::vector<std::string>{"dialogue", "summary"}));
  EXPECT_EQ(samsum.prompt(Record{{{"dialogue", "A: hi\nB: yo"}, {"summary", "greetings"}}, ""}),
            "Summarize this dialog:\nA: hi\nB: yo\n---\nSummary:\n");
  d.format = job::DataFormat::kGrammar;
  const PromptFormat grammar = prompt_format(d);
  EXPECT_EQ(grammar.response_field, "target");
  EXPECT_EQ(grammar.prompt(Record{{{"input", "he go"}, {"target", "he goes"}}, ""}),
            "Correct this to standard English: he go\n---\nCorrected: ");
}

TEST(Examples, BosAndPromptAreMaskedResponseAndEosAreLearned) {
  const nlohmann::json j = {
      {"added_tokens", nlohmann::json::array({{{"id", 1}, {"content", "<s>"}, {"special", true}},
                                              {{"id", 2}, {"content", "</s>"}, {"special", true}}})},
      {"normalizer", nullptr},
      {"pre_tokenizer", nullptr},
      {"decoder", nullptr},
      {"model", {{"type", "BPE"}, {"vocab", {{"a", 3}, {"b", 4}, {"c", 5}, {"ab", 6}}}, {"merges", {"a b"}}}}};
  const Tokenizer tok = Tokenizer::from_json(j.dump(), "toy.json");
  const Example e = make_example(tok, "aba", "cab", {1, 2, 0});
  EXPECT_EQ(e.ids, (std::vector<int32_t>{1, 6, 3, 5, 6, 2}));
  EXPECT_EQ(e.labels, (std::vector<int32_t>{-100, -100, -100, 5, 6, 2}));
  const Example cut = make_example(tok, "aba", "cab", {1, 2, 4});  // truncated to 4 tokens
  EXPECT_EQ(cut.ids, (std::vector<int32_t>{1, 6, 3, 5}));
  EXPECT_EQ(cut.labels, (std::vector<int32_t>{-100, -100, -100, 5}));
}

TEST(Packing, PositionsRestartPerExampleAndTheTailIsPadding) {
  // Two examples of 3 and 4 tokens (prompt masked) into rows of 5.
  const std::vector<Example> examples = {{{1, 10, 11}, {-100, -100, 11}}, {{1, 20, 21, 22}, {-100, 20, 21, 22}}};
  const PackedRows p = pack(examples, 5, 0);
  ASSERT_EQ(p.rows(), 2);
  EXPECT_EQ(p.ids, (std::vector<int32_t>{1, 10, 11, 1, 20, /**/ 21, 22, 0, 0, 0}));
  EXPECT_EQ(p.labels, (std::vector<int32_t>{-100, -100, 11, -100, 20, /**/ 21, 22, -100, -100, -100}));
  // Row 0: example 1 at 0..2, example 2 starts at 0 again; row 1: its continuation restarts, then padding.
  EXPECT_EQ(p.positions, (std::vector<int32_t>{0, 1, 2, 0, 1, /**/ 0, 1, 0, 1, 2}));
}

TEST(TokenFile, MappedRowsEqualInMemoryPackingAndStaleFilesAreIgnored) {
  // Random examples, including empty and longer-than-a-row ones.
  std::vector<Example> examples;
  uint32_t state = 12345;
  auto next = [&] { return state = state * 1664525u + 1013904223u; };
  for (int e = 0; e < 200; ++e) {
    Example ex;
    const int n = static_cast<int>(next() % 40);
    for (int i = 0; i < n; ++i) {
      ex.ids.push_back(static_cast<int32_t>(next() % 500));
      ex.labels.push_back(i < n / 3 ? kIgnoreLabel : ex.ids.back());
    }
    examples.push_back(ex);
  }
  const std::string path = write("x.tokens", "");
  TokenFile::write(path, "key-1", examples);
  EXPECT_EQ(TokenFile::open(path, "key-2", 500), nullptr);
  const auto mapped = TokenFile::open(path, "key-1", 500);
  ASSERT_NE(mapped, nullptr);
  EXPECT_EQ(mapped->num_examples(), 200);
  // The data's identity in checkpoints: the same tokens give the same checksum, in a file or in
  // memory, under any key; one label more masked gives another.
  TokenFile::write(path + ".2", "another key", examples);
  EXPECT_EQ(TokenFile::open(path + ".2", "another key", 500)->checksum(), mapped->checksum());
  EXPECT_EQ(TokenFile::from_examples(examples)->checksum(), mapped->checksum());
  std::vector<Example> masked = examples;
  for (Example& e : masked)
    if (!e.labels.empty() && e.labels.back() != kIgnoreLabel) {
      e.labels.back() = kIgnoreLabel;
      break;
    }
  EXPECT_NE(TokenFile::from_examples(masked)->checksum(), mapped->checksum());
  for (const int64_t t : {1, 7, 16, 33}) {
    const PackedRows reference = pack(examples, t, 7);
    for (const auto& tokens : {mapped, TokenFile::from_examples(examples)}) {
      const PackedRowView view(tokens, t, 7);
      ASSERT_EQ(view.rows(), reference.rows()) << t;
      std::vector<int32_t> ids(static_cast<size_t>(t)), labels(ids.size()), positions(ids.size());
      for (int64_t r = 0; r < view.rows(); ++r) {
        view.row(r, ids.data(), labels.data(), positions.data());
        const auto at = reference.ids.begin() + r * t;
        ASSERT_TRUE(std::equal(ids.begin(), ids.end(), at)) << "ids of row " << r << " at " << t;
        ASSERT_TRUE(std::equal(labels.begin(), labels.end(), reference.labels.begin() + r * t)) << r;
        ASSERT_TRUE(std::equal(positions.begin(), positions.end(), reference.positions.begin() + r * t)) << r;
      }
    }
  }
  // A damaged file is an error, not garbage.
  std::filesystem::resize_file(path, 100);
  EXPECT_THROW(TokenFile::open(path, "key-1", 500), common::Error);
}

// Damage anywhere is named before anything is read through the file: counts that would overflow
// the size computation, one offset flipped (padded batching once read past the mapping), a flipped
// id (the checksum), ids outside the vocabulary.
// A token file truncated by another process while it is mapped: reading past its new end would
// end the process with a bare SIGBUS; it ends with status 1 and the file named instead.
TEST(TokenFile, ATruncatedMappedFileEndsTheProcessNamingItNotWithSigbus) {
  std::vector<Example> examples(400);
  for (Example& ex : examples)
    for (int i = 0; i < 64; ++i) {
      ex.ids.push_back(i);
      ex.labels.push_back(i);
    }
  const std::string path = write("truncated.tokens", "");
  TokenFile::write(path, "key", examples);
  EXPECT_EXIT(
      {
        const auto mapped = TokenFile::open(path, "key", 500);
        if (mapped == nullptr || ::truncate(path.c_str(), 0) != 0) std::exit(2);
        int64_t sum = 0;
        for (const int32_t id : mapped->ids()) sum += id;
        std::exit(sum == 0 ? 3 : 4);  // not reached: the pages past the end fault
      },
      ::testing::ExitedWithCode(1), "truncated.tokens shrank while it was being read");
}

TEST(TokenFile, DamageIsFoundWithoutOverflowAndNamed) {
  std::vector<Example> examples(3);
  for (int e = 0; e < 3; ++e)
    for (int i = 0; i < 4; ++i) {
      examples[static_cast<size_t>(e)].ids.push_back(e * 10 + i);
      examples[static_cast<size_t>(e)].labels.push_back(i == 0 ? kIgnoreLabel : e * 10 + i);
    }
  const std::string path = write("d.tokens", "");
  const std::string key = "k";
  // The key "k" pads to 8 bytes; then the notes' length (no notes).
  const size_t counts_at = 16 + 8 + 8, offsets_at = counts_at + 24;
  auto patched = [&](size_t at, uint64_t value) {
    TokenFile::write(path, key, examples);
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(at));
    f.write(reinterpret_cast<const char*>(&value), 8);
  };
  auto error = [&](int64_t vocab) {
    try {
      TokenFile::open(path, key, vocab);
    } catch (const common::Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  TokenFile::write(path, key, examples);
  ASSERT_NE(TokenFile::open(path, key, 100), nullptr);
  EXPECT_NE(error(21).find("token 9 has the id 21, outside the vocabulary of 21"), std::string::npos) << error(21);
  patched(counts_at, uint64_t{1} << 61);  // examples: (n + 1) * 8 wraps around to 8
  EXPECT_NE(error(100).find("its counts (2305843009213693952 examples, 12 tokens) exceed"), std::string::npos) << error(100);
  patched(counts_at + 8, ~uint64_t{0} / 4);  // tokens
  EXPECT_NE(error(100).find("exceed its"), std::string::npos) << error(100);
  patched(offsets_at + 8, 9);  // example 1 starts at 9 instead of 4: checksum first
  EXPECT_NE(error(100).find(path + " is damaged: its checksum does not match"), std::string::npos) << error(100);
  patched(offsets_at + 4 * 8 + 8, 0x0000000100000001ull);  // ids 2 and 3 of example 0
  EXPECT_NE(error(100).find("its checksum does not match"), std::string::npos) << error(100);
  TokenFile::write(path, key, examples);
  std::ofstream(path, std::ios::app) << "trailing";
  EXPECT_NE(error(100).find("bytes, where its counts make"), std::string::npos) << error(100);
}

}  // namespace
}  // namespace shardtune::data
