// Writes to a file on a thread of its own, so that the caller reads and checks the next piece while
// the last one is copied to the page cache, and the disk writes each piece back as soon as it is
// written (sync_file_range) instead of all at the final sync. Memory is bounded: `buffers` buffers
// of `buffer_bytes`; take() waits for a free one. Errors of the writer (a full disk) are thrown by
// the next take(), put() or finish(). Not for HDF5 calls: HDF5 is not thread-safe here, so files
// are laid out (datasets created, offsets read) before their bytes go through this. Buffers start at
// a multiple of kDirectAlignment, so that a file opened with O_DIRECT can take them (direct_file.h).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <cstdlib>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace shardtune::common {

// What O_DIRECT asks of a write: its memory, file offset and length all multiples of this (the
// largest logical block size of common disks).
inline constexpr size_t kDirectAlignment = 4096;

// A buffer for O_DIRECT transfers: `bytes` (rounded up) starting at a multiple of kDirectAlignment,
// on transparent huge pages when it is 2 MiB or more and the kernel allows it (THP "madvise"
// mode), so that a transfer pins one page per 2 MiB in place of 512. Throws common::Error(kIo)
// when memory runs out.
struct FreeIoBuffer {
  void operator()(char* p) const { std::free(p); }
};
using IoBuffer = std::unique_ptr<char, FreeIoBuffer>;
IoBuffer io_buffer(size_t bytes);

class WriteBehind {
 public:
  WriteBehind(int buffers, size_t buffer_bytes);
  ~WriteBehind();  // waits for the writer; errors unseen by finish() are dropped (an exception is unwinding)
  WriteBehind(const WriteBehind&) = delete;
  WriteBehind& operator=(const WriteBehind&) = delete;

  // A free buffer of buffer_bytes() to fill.
  char* take();
  // Writes `bytes` of `buffer` (from take()) at `offset` of `fd`, whose name `path` errors quote.
  void put(char* buffer, size_t bytes, int fd, int64_t offset, const std::string& path);
  // Copies `bytes` of `data` into buffers (take/put, a buffer at a time) to be written at `offset`.
  void write(const void* data, size_t bytes, int fd, int64_t offset, const std::string& path);
  // Writes `bytes` of `data` at `offset` straight from the caller's memory, without a copy or a
  // buffer of this writer's: the memory must stay unchanged until finish() returns.
  void put_borrowed(const void* data, size_t bytes, int fd, int64_t offset, const std::string& path);
  // Waits until everything put so far is written, then (`sync`) fdatasync()s `fd`.
  void finish(int fd, const std::string& path, bool sync = true);
  size_t buffer_bytes() const { return buffer_bytes_; }

 private:
  struct Job {
    char* buffer;  // one of storage_'s, or the caller's memory (put_borrowed)
    bool own;
    size_t bytes;
    int fd;
    int64_t offset;
    std::string path;
  };
  void run();
  void rethrow_locked();

  size_t buffer_bytes_;
  std::vector<IoBuffer> storage_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<char*> free_;
  std::deque<Job> queue_;
  bool busy_ = false, stopping_ = false;
  std::exception_ptr error_;
  std::thread thread_;
};

}  // namespace shardtune::common
