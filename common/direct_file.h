// Writing the bytes of a file laid out beforehand (its datasets created, their offsets known) with
// O_DIRECT where the file system allows it: the disk takes the bytes straight from aligned buffers,
// without the page cache. On these machines that writes about 3x faster than through the page cache,
// for a tenth of the CPU (bench/async_ckpt.sh), which matters most to a checkpoint written on a
// thread beside training. Each write goes through a WriteBehind (so the next piece is copied while
// the last is written); its page-aligned middle through the O_DIRECT descriptor, its unaligned head
// and tail (and every write where O_DIRECT is refused, as on tmpfs) through an ordinary one. The
// two never share a page: a page holds direct bytes only if the whole page lies inside one write.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "common/write_behind.h"

namespace shardtune::common {

// A DirectWriter's own buffers, unless it is given a WriteBehind to share: 4 of 16 MiB.
inline constexpr int kDirectBuffers = 4;
inline constexpr size_t kDirectBufferBytes = size_t(16) << 20;

class DirectWriter {
 public:
  // Opens `path`, which must exist. Throws common::Error(kIo) naming it. `shared`: a WriteBehind
  // of aligned buffers to write through, shared by several files (it must outlive this); else one
  // of its own (kDirectBuffers of kDirectBufferBytes).
  explicit DirectWriter(std::string path, WriteBehind* shared = nullptr);
  ~DirectWriter();  // waits for its queued writes (errors dropped: an exception is unwinding), closes
  DirectWriter(const DirectWriter&) = delete;
  DirectWriter& operator=(const DirectWriter&) = delete;

  // Copies `bytes` of `data` to be written at `offset`; returns once they are copied.
  void write(const void* data, size_t bytes, int64_t offset);
  // Writes `bytes` of `data` at `offset`, the aligned middle straight from `data` without a copy
  // where `data` and `offset` lie at the same place within a kDirectAlignment page (else as write()
  // does): `data` must stay unchanged until finish() returns.
  void write_in_place(const void* data, size_t bytes, int64_t offset);
  // Waits until every write is on disk (fdatasync), then closes. Throws the first failure.
  void finish();
  // Waits until every write has been made, then closes without a sync: a later DirectWriter of
  // the same path may go on, and whoever writes the file last syncs it (fsync_path).
  void close();
  bool direct() const { return direct_fd_ >= 0; }
  // Bytes the disk took straight from the caller's memory (write_in_place), without a copy.
  uint64_t bytes_in_place() const { return bytes_in_place_; }
  const std::string& path() const { return path_; }

 private:
  void write(const void* data, size_t bytes, int64_t offset, bool borrow);

  std::string path_;
  int fd_ = -1, direct_fd_ = -1;
  uint64_t bytes_in_place_ = 0;
  std::unique_ptr<WriteBehind> own_;
  WriteBehind& behind_;
};

}  // namespace shardtune::common
