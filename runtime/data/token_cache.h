// Where a data file's token files live and which of them may be used: one file per key (what it
// was tokenized from), beside the data file or, when that folder cannot be written, under the
// job's output directory; only files of this user that nobody else may write are trusted (their
// names follow from the data, so whoever can write that folder could put one there). Files of
// other keys that no job has used for a while are removed, so changing a setting does not leave
// the folder filling up.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "runtime/data/token_file.h"

namespace shardtune::data {

// What identifies a data file's content for a cache key: its absolute path, size, modification
// time, inode and change time (which no one can set back, so an edit that restores the
// modification time still shows); the same on every node that mounts the file.
std::string data_file_stamp(const std::string& path);

class TokenCache {
 public:
  // `what`: "training" or "validation"; `fallback_dir`: where the file goes when the data's
  // folder cannot be written.
  TokenCache(const std::string& data_file, const std::string& fallback_dir, std::string key, std::string what);

  // The token file of this key, or nullptr when there is none (or only a damaged or untrusted
  // one, which is reported). Marks the file as used now.
  std::shared_ptr<const TokenFile> open(int64_t vocab_size) const;
  // Writes the token file at the first place that takes it; throws common::Error(kIo) when none does.
  void write(const std::vector<Example>& examples, const std::string& notes) const;
  // Removes this data file's token files of other keys (and of older formats, and temporary files
  // of writers that are gone) beyond the `keep` most recently used, this key's counting as one.
  // Only files of this user, unused for at least `grace` (another job may be about to map one).
  // Returns the paths removed.
  std::vector<std::string> remove_stale(int keep, std::chrono::seconds grace) const;

  const std::vector<std::string>& paths() const { return paths_; }

 private:
  std::string data_name_, what_, key_;
  std::vector<std::string> paths_;
};

}  // namespace shardtune::data
