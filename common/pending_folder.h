// A folder that appears whole or not at all: its files are written into a temporary sibling
// (<final>.tmp-<host>-<pid>-<n>), and commit() renames that into place and makes the rename durable.
// Dropped before commit (an error, a full disk), the temporary folder is removed and the final path
// was never touched; interrupted (common/interrupt_cleanup.h), the tool's handler removes it; and
// temporary siblings of the same final path left by processes of this host that are gone (killed)
// are removed when the next one starts. The final path must not exist, or be an empty folder (not a
// link to one: the rename would not go through it). Every folder a tool writes goes through one.
#pragma once

#include <string>

namespace shardtune::common {

// "<host>-<pid>-<n>": a part for temporary names that no other writer, on any node, uses.
std::string unique_suffix();

class PendingFolder {
 public:
  // Throws Error(kIo) when `final_path` exists and is not an empty folder, or the temporary folder
  // cannot be made.
  explicit PendingFolder(std::string final_path);
  ~PendingFolder();  // removes the temporary folder unless committed; never throws
  PendingFolder(const PendingFolder&) = delete;
  PendingFolder& operator=(const PendingFolder&) = delete;

  const std::string& path() const { return tmp_; }  // where the files go
  const std::string& final_path() const { return final_; }
  void commit();

 private:
  void remove_stale_siblings() const;
  std::string final_, tmp_;
  bool committed_ = false;
  int registered_ = -1;  // interrupt_cleanup's handle
};

}  // namespace shardtune::common
