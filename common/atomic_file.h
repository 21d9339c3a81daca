// A file that appears whole or not at all: written under a temporary name of its own, fsynced,
// renamed over the final path, and the directory fsynced so the rename survives a crash. A
// writer that fails or is destroyed before commit() removes its temporary file and leaves the
// final path untouched. Temporary names carry the process id and a counter, so concurrent writers
// of one path never share one. The only place shardtune writes a file atomically.
#pragma once

#include <cstddef>
#include <string>

namespace shardtune::common {

class AtomicFile {
 public:
  // Creates the parent directories and the temporary file. Throws Error(kIo) naming `path`.
  explicit AtomicFile(std::string path);
  ~AtomicFile();  // removes the temporary file unless committed; never throws
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  int fd() const { return fd_; }
  const std::string& path() const { return path_; }
  const std::string& temporary_path() const { return tmp_; }

  // All `size` bytes (retrying short writes and EINTR).
  void write(const void* data, size_t size);
  void write(const std::string& text) { write(text.data(), text.size()); }

  // fsync, close, rename over path(), fsync the directory.
  void commit();

 private:
  std::string path_, tmp_;
  int fd_ = -1;
  bool committed_ = false;
  int registered_ = -1;  // common/interrupt_cleanup.h: removed if a tool is interrupted
};

// Durability of a directory entry (a rename, a new file) or of a file's data. Throws Error(kIo).
void fsync_path(const std::string& path, bool directory);

}  // namespace shardtune::common
