// SentencePiece `tokenizer.model` files (Llama 2), through Debian's libsentencepiece, and their
// conversion to a Hugging Face tokenizer.json the way transformers converts Llama's (vocabulary
// with scores, merges recovered from the vocabulary, Prepend/Replace normalizer, byte fallback).
// Tools only: libsentencepiece's protobuf clashes with LibTorch's in one process, so the ranks
// read the converted tokenizer.json.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace shardtune::data {

class SentencePieceModel {
 public:
  // Throws common::Error(kConfig) naming the file when libsentencepiece cannot load it.
  explicit SentencePieceModel(const std::string& path);
  ~SentencePieceModel();

  // Ids of `text` (no BOS/EOS). Control tokens written in the text (<s>) are recognised first, as
  // Hugging Face's tokenizers do; each stretch between them gets the model's dummy prefix.
  std::vector<int32_t> encode(std::string_view text) const;
  // Control tokens as written; the stretches between them decoded by libsentencepiece.
  std::string decode(const std::vector<int32_t>& ids) const;

  int32_t size() const;
  const std::string& piece(int32_t id) const;
  bool is_control(int32_t id) const;  // <s>, </s>, ...
  bool is_unknown(int32_t id) const;
  int32_t bos_id() const;  // -1: none
  int32_t eos_id() const;

  // The equivalent tokenizer.json (BPE models only).
  std::string to_tokenizer_json() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace shardtune::data
