#include "runtime/data/sentencepiece_model.h"

#include <fmt/format.h>
#include <sentencepiece_processor.h>

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>
#include <unordered_map>

#include "common/error.h"
#include "runtime/data/added_tokens.h"
#include "runtime/data/utf8.h"

namespace shardtune::data {

using common::ErrorKind;

struct SentencePieceModel::Impl {
  sentencepiece::SentencePieceProcessor sp;
  std::string path;
  AddedTokenSplitter control;
};

SentencePieceModel::SentencePieceModel(const std::string& path) : impl_(std::make_unique<Impl>()) {
  impl_->path = path;
  const auto status = impl_->sp.Load(path);
  ST_CHECK(status.ok(), ErrorKind::kConfig, "{}: not a SentencePiece model: {}", path, status.ToString());
  std::vector<AddedToken> control;
  for (int32_t id = 0; id < size(); ++id)
    if (is_control(id) || is_unknown(id)) control.push_back({piece(id), id, true, false, false, false});
  impl_->control = AddedTokenSplitter(control);
}

SentencePieceModel::~SentencePieceModel() = default;

std::vector<int32_t> SentencePieceModel::encode(std::string_view text) const {
  std::string repaired;
  if (!is_valid_utf8(text)) {
    repaired = repair_utf8(text);
    text = repaired;
  }
  std::vector<int32_t> out;
  for (const Section& s : impl_->control.split(text)) {
    if (s.added_id >= 0) {
      out.push_back(s.added_id);
      continue;
    }
    if (s.text.empty()) continue;
    std::vector<int> ids;
    const auto status = impl_->sp.Encode(std::string(s.text), &ids);
    ST_CHECK(status.ok(), ErrorKind::kInternal, "{}: SentencePiece encode failed: {}", impl_->path, status.ToString());
    out.insert(out.end(), ids.begin(), ids.end());
  }
  return out;
}

std::string SentencePieceModel::decode(const std::vector<int32_t>& ids) const {
  std::string text;
  std::vector<int> run;
  auto flush = [&] {
    if (run.empty()) return;
    std::string part;
    const auto status = impl_->sp.Decode(run, &part);
    ST_CHECK(status.ok(), ErrorKind::kInternal, "{}: SentencePiece decode failed: {}", impl_->path, status.ToString());
    text += part;
    run.clear();
  };
  for (const int32_t id : ids) {
    ST_CHECK(id >= 0 && id < size(), ErrorKind::kUsage, "token id {} is outside the vocabulary of {} (size {})", id,
             impl_->path, size());
    if (is_control(id) || is_unknown(id)) {
      flush();
      text += piece(id);
    } else {
      run.push_back(id);
    }
  }
  flush();
  return text;
}

int32_t SentencePieceModel::size() const { return impl_->sp.GetPieceSize(); }
const std::string& SentencePieceModel::piece(int32_t id) const { return impl_->sp.IdToPiece(id); }
bool SentencePieceModel::is_control(int32_t id) const { return impl_->sp.IsControl(id); }
bool SentencePieceModel::is_unknown(int32_t id) const { return impl_->sp.IsUnknown(id); }
int32_t SentencePieceModel::bos_id() const { return impl_->sp.bos_id(); }
int32_t SentencePieceModel::eos_id() const { return impl_->sp.eos_id(); }

std::string SentencePieceModel::to_tokenizer_json() const {
  using nlohmann::json;
  const int32_t n = size();
  // A BPE model's ordinary pieces score in merge order (non-increasing with the id); a unigram
  // model's scores are log probabilities in no such order.
  bool byte_fallback = false;
  float last = 0;
  bool first = true;
  for (int32_t id = 0; id < n; ++id) {
    byte_fallback = byte_fallback || impl_->sp.IsByte(id);
    if (is_control(id) || is_unknown(id) || impl_->sp.IsByte(id)) continue;
    const float score = impl_->sp.GetScore(id);
    ST_CHECK(first || score <= last, ErrorKind::kConfig,
             "{}: not a BPE model (scores rise at piece {} \"{}\"): only BPE SentencePiece models convert to "
             "tokenizer.json",
             impl_->path, id, piece(id));
    last = score;
    first = false;
  }
  std::unordered_map<std::string, int32_t> vocab;
  for (int32_t id = 0; id < n; ++id) vocab.emplace(piece(id), id);
  // Merges as transformers recovers them: every split of a piece into two pieces of the
  // vocabulary, ordered by the merged piece's score (highest first; ties keep vocabulary order),
  // and within one piece by the ids of its parts.
  struct Merge {
    float score;
    int32_t left, right;
  };
  std::vector<Merge> merges;
  for (int32_t id = 0; id < n; ++id) {
    const std::string& p = piece(id);
    std::vector<Merge> local;
    for (size_t cut = 1; cut < p.size(); ++cut) {
      const auto l = vocab.find(p.substr(0, cut)), r = vocab.find(p.substr(cut));
      if (l != vocab.end() && r != vocab.end()) local.push_back({impl_->sp.GetScore(id), l->second, r->second});
    }
    std::sort(local.begin(), local.end(), [](const Merge& a, const Merge& b) {
      return a.left != b.left ? a.left < b.left : a.right < b.right;
    });
    merges.insert(merges.end(), local.begin(), local.end());
  }
  std::stable_sort(merges.begin(), merges.end(), [](const Merge& a, const Merge& b) { return a.score > b.score; });

  json vocab_json = json::object();
  for (int32_t id = 0; id < n; ++id) vocab_json[piece(id)] = id;
  json merges_json = json::array();
  for (const Merge& m : merges) merges_json.push_back(piece(m.left) + " " + piece(m.right));
  json added = json::array();
  std::string unk;
  for (int32_t id = 0; id < n; ++id) {
    if (!is_control(id) && !is_unknown(id)) continue;
    if (is_unknown(id)) unk = piece(id);
    added.push_back({{"id", id}, {"content", piece(id)}, {"single_word", false}, {"lstrip", false}, {"rstrip", false},
                     {"normalized", false}, {"special", true}});
  }
  const std::string space = "\xe2\x96\x81";  // ▁
  json j = {
      {"version", "1.0"},
      {"truncation", nullptr},
      {"padding", nullptr},
      {"added_tokens", added},
      {"normalizer",
       {{"type", "Sequence"},
        {"normalizers", json::array({{{"type", "Prepend"}, {"prepend", space}},
                                     {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", space}}})}}},
      {"pre_tokenizer", nullptr},
      {"post_processor", nullptr},
      {"decoder",
       {{"type", "Sequence"},
        {"decoders", json::array({{{"type", "Replace"}, {"pattern", {{"String", space}}}, {"content", " "}},
                                  {{"type", "ByteFallback"}},
                                  {{"type", "Fuse"}},
                                  {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}})}}},
      {"model",
       {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", unk.empty() ? json(nullptr) : json(unk)},
        {"continuing_subword_prefix", nullptr}, {"end_of_word_suffix", nullptr}, {"fuse_unk", true},
        {"byte_fallback", byte_fallback}, {"vocab", vocab_json}, {"merges", merges_json}}}};
  return j.dump();
}

}  // namespace shardtune::data
