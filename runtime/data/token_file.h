// Tokenized examples on disk: every example's ids and labels back to back, with the offsets
// where each starts. Written once per (data file, tokenizer, prompt format) next to the data
// file, so a requeued or resubmitted job does not tokenize again; read through mmap, so every
// rank of a node shares one copy in the page cache and host memory stays bounded however large
// the data is. Packed rows are views of it (packed_rows.h).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "runtime/data/sft_examples.h"

namespace shardtune::data {

class TokenFile {
 public:
  // Writes atomically (temporary file, fsync, rename). `key` identifies what was tokenized;
  // `notes` says what reading and tokenizing found (records skipped, examples cut), for the runs
  // that map the file instead of reading the data again.
  static void write(const std::string& path, const std::string& key, const std::vector<Example>& examples,
                    const std::string& notes = "");
  // nullptr when the file is missing, of an older format (is_older_format), or made for another key. Throws
  // common::Error(kIo) when it is damaged: a size its counts do not make (checked without
  // overflow), a checksum that does not match, offsets that go backwards, or an id or label
  // outside 0..vocab_size-1 (labels may also be kIgnoreLabel).
  static std::shared_ptr<const TokenFile> open(const std::string& path, const std::string& key, int64_t vocab_size);
  // In memory, for tests and small data.
  static std::shared_ptr<const TokenFile> from_examples(const std::vector<Example>& examples);

  ~TokenFile();
  TokenFile(const TokenFile&) = delete;
  TokenFile& operator=(const TokenFile&) = delete;

  const std::string& notes() const { return notes_; }
  // The checksum of the examples' offsets, ids and labels (the file's own): the same tokens give
  // the same value wherever the file was written or copied. A checkpoint records it as the
  // identity of the data it trained on.
  uint64_t checksum() const { return checksum_; }
  int64_t num_examples() const { return static_cast<int64_t>(offsets_.size()) - 1; }
  int64_t num_tokens() const { return offsets_.empty() ? 0 : offsets_.back(); }
  std::span<const int32_t> ids() const { return ids_; }
  std::span<const int32_t> labels() const { return labels_; }
  std::span<const int64_t> offsets() const { return offsets_; }  // num_examples + 1, from 0

 private:
  TokenFile() = default;
  void* map_ = nullptr;
  size_t map_size_ = 0;
  int guard_ = -1;  // common/mapping_guard.h
  std::vector<int32_t> owned_ids_, owned_labels_;
  std::vector<int64_t> owned_offsets_;
  std::span<const int32_t> ids_, labels_;
  std::span<const int64_t> offsets_;
  std::string notes_;
  uint64_t checksum_ = 0;
};

// Whether the file at `path` is a token file of a format this build no longer reads.
bool is_older_token_file(const std::string& path);

// 64-bit FNV-1a: a stable fingerprint for cache keys.
uint64_t fingerprint(std::string_view bytes, uint64_t seed = 1469598103934665603ull);

}  // namespace shardtune::data
