// Tokenizer pieces on hand-made inputs: merge order, ignore_merges, byte fallback, added tokens
// with lstrip/rstrip, UTF-8 repair as browsers do it, and the Unicode white-space rewrite.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "runtime/data/regex_split.h"
#include "runtime/data/tokenizer.h"
#include "runtime/data/utf8.h"

namespace shardtune::data {
namespace {

using nlohmann::json;

// A SentencePiece-style BPE over "a", "b", "c" with merges ab (rank 0), bc (rank 1), abc (rank 2).
json toy(bool ignore_merges = false) {
  json vocab = {{"<unk>", 0}, {"<s>", 1}, {"a", 3}, {"b", 4}, {"c", 5}, {"ab", 6}, {"bc", 7}, {"abc", 8},
                {"\xe2\x96\x81", 9}, {"ca", 10}};
  for (int b = 0; b < 256; ++b) vocab[fmt::format("<0x{:02X}>", b)] = 100 + b;
  return {{"added_tokens", json::array({{{"id", 1}, {"content", "<s>"}, {"special", true}, {"normalized", false}},
                                        {{"id", 400}, {"content", "<T>"}, {"special", true}, {"normalized", false},
                                         {"lstrip", true}, {"rstrip", true}}})},
          {"normalizer", nullptr},
          {"pre_tokenizer", nullptr},
          {"decoder", {{"type", "Sequence"}, {"decoders", json::array({{{"type", "ByteFallback"}}, {{"type", "Fuse"}}})}}},
          {"model",
           {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", "<unk>"}, {"byte_fallback", true},
            {"ignore_merges", ignore_merges}, {"vocab", vocab},
            {"merges", json::array({"a b", "b c", "ab c", "c a"})}}}};
}

Tokenizer make(const json& j) { return Tokenizer::from_json(j.dump(), "toy.json"); }

TEST(Bpe, LowestRankMergesFirstLeftmostOnTies) {
  const Tokenizer t = make(toy());
  EXPECT_EQ(t.encode("abc"), (std::vector<int32_t>{8}));      // ab, then ab+c
  EXPECT_EQ(t.encode("bca"), (std::vector<int32_t>{7, 3}));   // bc (1) before ca (3)
  EXPECT_EQ(t.encode("cab"), (std::vector<int32_t>{5, 6}));   // ab (0) before ca (3)
  EXPECT_EQ(t.encode("abab"), (std::vector<int32_t>{6, 6}));
  EXPECT_EQ(t.encode("caca"), (std::vector<int32_t>{10, 10}));
}

TEST(Bpe, UnknownCharactersFallBackToBytes) {
  const Tokenizer t = make(toy());
  // "é" is C3 A9: not in the vocabulary, so its bytes.
  EXPECT_EQ(t.encode("a\xc3\xa9"), (std::vector<int32_t>{3, 100 + 0xC3, 100 + 0xA9}));
  EXPECT_EQ(t.decode(t.encode("a\xc3\xa9")), "a\xc3\xa9");
}

TEST(AddedTokens, AreFoundInRawTextAndStripTheirNeighbours) {
  const Tokenizer t = make(toy());
  EXPECT_EQ(t.encode("a<s>b"), (std::vector<int32_t>{3, 1, 4}));
  EXPECT_EQ(t.encode("a  <T>  b"), (std::vector<int32_t>{3, 400, 4}));  // lstrip and rstrip
  EXPECT_EQ(t.encode("<s<s>"), (std::vector<int32_t>{100 + '<', 100 + 's', 1}));
  EXPECT_TRUE(t.is_added_token(400));
  EXPECT_FALSE(t.is_added_token(3));
}

TEST(Bpe, IgnoreMergesTakesWholeWordsFromTheVocabulary) {
  json j = toy(true);
  j["model"]["merges"] = json::array({"a b", "b c"});  // "abc" is in the vocabulary but unreachable by merges
  EXPECT_EQ(make(j).encode("abc"), (std::vector<int32_t>{8}));
  j["model"]["ignore_merges"] = false;
  EXPECT_EQ(make(j).encode("abc"), (std::vector<int32_t>{6, 5}));
}

TEST(TokenizerFile, UnsupportedPartsAndBrokenMergesAreRefusedByName) {
  json j = toy();
  j["normalizer"] = {{"type", "NFKC"}};
  try {
    make(j);
    FAIL() << "NFKC accepted";
  } catch (const common::Error& e) {
    EXPECT_NE(std::string(e.what()).find("toy.json: normalizer {\"type\":\"NFKC\"} is not supported"), std::string::npos)
        << e.what();
  }
  j = toy();
  j["model"]["merges"].push_back("x y");
  EXPECT_THROW(make(j), common::Error);
  EXPECT_THROW(Tokenizer::from_json("{not json", "bad.json"), common::Error);
}

TEST(TokenizerFile, DeepNestingIsRefusedByName) {
  const std::string deep = "{\"model\": " + std::string(200000, '[') + std::string(200000, ']') + "}";
  try {
    Tokenizer::from_json(deep, "deep.json");
    ADD_FAILURE() << "accepted";
  } catch (const common::Error& e) {
    EXPECT_NE(std::string(e.what()).find("deep.json: nested more than 64 deep"), std::string::npos) << e.what();
  }
  const std::string config = "{\"bos_token\": " + std::string(200000, '[') + std::string(200000, ']') + "}";
  try {
    Tokenizer::from_json(toy().dump(), "toy.json", config);
    ADD_FAILURE() << "accepted";
  } catch (const common::Error& e) {
    EXPECT_NE(std::string(e.what()).find("toy.json (tokenizer_config.json): nested more than 64 deep"),
              std::string::npos)
        << e.what();
  }
}

// Ids are refused outside 0..kMaxTokenId by name, before anything is sized by them: INT_MAX once
// overflowed id + 1 and crashed; 2e9 asked for 64 GB of id-to-text table.
TEST(TokenizerFile, TokenIdsOutsideTheirRangeAreRefusedByName) {
  for (const json id : {json(2147483647), json(2000000000), json(4294967295u), json(-1), json(16777216), json(1.5),
                        json("7")}) {
    SCOPED_TRACE(id.dump());
    json added = toy();
    added["added_tokens"].push_back({{"id", id}, {"content", "<big>"}, {"special", true}});
    try {
      make(added);
      ADD_FAILURE() << "accepted";
    } catch (const common::Error& e) {
      EXPECT_EQ(e.kind(), common::ErrorKind::kConfig);
      EXPECT_NE(std::string(e.what()).find("toy.json: added token \"<big>\" has the id " + id.dump()), std::string::npos)
          << e.what();
    }
    json vocab = toy();
    vocab["model"]["vocab"]["x\ny"] = id;
    try {
      make(vocab);
      ADD_FAILURE() << "accepted";
    } catch (const common::Error& e) {
      EXPECT_NE(std::string(e.what()).find("toy.json: vocabulary entry \"x\\ny\" has the id " + id.dump()),
                std::string::npos)
          << e.what();
    }
  }
  json sparse = toy();  // ids past the vocabulary are fine (Llama 3's special tokens are)
  sparse["added_tokens"].push_back({{"id", 300000}, {"content", "<far>"}, {"special", true}});
  EXPECT_EQ(make(sparse).encode("a<far>"), (std::vector<int32_t>{3, 300000}));
}

TEST(Utf8, InvalidBytesBecomeReplacementCharactersAsBrowsersDecodeThem) {
  const std::string r = "\xEF\xBF\xBD";
  EXPECT_EQ(repair_utf8("ok"), "ok");
  EXPECT_EQ(repair_utf8("\xff"), r);
  EXPECT_EQ(repair_utf8("\xc3"), r);                  // truncated at the end
  EXPECT_EQ(repair_utf8("\xe2\x82"), r);              // one U+FFFD for the maximal subpart
  EXPECT_EQ(repair_utf8("\xe2\x82x"), r + "x");
  EXPECT_EQ(repair_utf8("\xc0\xaf"), r + r);          // overlong: each byte
  EXPECT_EQ(repair_utf8("\xed\xa0\x80"), r + r + r);  // a surrogate
  EXPECT_EQ(repair_utf8("\xf4\x90\x80\x80"), r + r + r + r);
  EXPECT_EQ(repair_utf8("a\xc3(b"), "a" + r + "(b");
  EXPECT_TRUE(is_valid_utf8("\xf0\x9f\x98\x80"));
}

TEST(RegexSplit, WhiteSpaceIsUnicodeWhiteSpaceAndPiecesCoverTheText) {
  const RegexSplitter split(R"(\s+|\S+)");
  std::vector<std::string_view> pieces;
  const std::string text = "a\xe1\xa0\x8e" "b\xe3\x80\x80" "c";  // U+180E is not white space; U+3000 is
  split.split(text, pieces);
  ASSERT_EQ(pieces.size(), 3u);
  EXPECT_EQ(pieces[0], "a\xe1\xa0\x8e" "b");
  EXPECT_EQ(pieces[1], "\xe3\x80\x80");
  EXPECT_EQ(pieces[2], "c");
  EXPECT_THROW(RegexSplitter("(unclosed"), common::Error);
}

}  // namespace
}  // namespace shardtune::data
