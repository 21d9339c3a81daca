// Reading a planned sequence of byte ranges of files ahead of the caller, on threads of its own,
// with O_DIRECT where the file system allows it (through the page cache where it refuses). The caller takes the bytes piece by piece, in the planned order, straight out of the
// buffers the disk wrote them into.
//
// Why not plain pread(): on these machines a cold buffered read of a large file, with the caller
// checking and copying each piece between reads, ran at 0.4 GB/s and spent almost all of it in the
// kernel's copy out of the page cache; the same bytes read with O_DIRECT, two requests in flight,
// came in at 1.0-2.0 GB/s for a tenth of the CPU (bench/read_bench). Memory is bounded:
// `buffers` buffers of `buffer_bytes`, whatever the ranges.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/write_behind.h"  // IoBuffer

namespace shardtune::common {

inline constexpr int kReadBuffers = 4;
inline constexpr size_t kReadBufferBytes = size_t(16) << 20;
inline constexpr int kReadThreads = 2;

class ReadAhead {
 public:
  struct Range {
    std::string path;
    int64_t offset = 0;
    int64_t bytes = 0;
  };
  // Starts reading `ranges` at once, in order. Throws common::Error(kIo) naming a file that cannot
  // be read. Files are opened as their reads come, at most `max_open` at once (the least recently
  // used closed first), however many the ranges name. `buffer_bytes`: a multiple of
  // kDirectAlignment. `direct` false: through the page cache only.
  explicit ReadAhead(std::vector<Range> ranges, int buffers = kReadBuffers, size_t buffer_bytes = kReadBufferBytes,
                     int threads = kReadThreads, bool direct = true, size_t max_open = 0 /* open_file_share() */);
  ~ReadAhead();  // stops the threads; what they were reading is dropped
  ReadAhead(const ReadAhead&) = delete;
  ReadAhead& operator=(const ReadAhead&) = delete;

  struct Piece {
    const char* data = nullptr;
    size_t bytes = 0;  // 0: the range is done (or was passed by)
  };
  // The next bytes of range `range`, at most `max`, valid until the next call. Whatever is left
  // of earlier ranges is skipped; a range already passed gives an empty piece. Throws
  // common::Error(kIo) naming the file and offset where a read failed or the file ended early.
  Piece next(size_t range, size_t max);
  size_t ranges() const { return ranges_.size(); }
  bool direct() const;  // every file opened so far read with O_DIRECT
  size_t peak_open() const;  // the most files open at once so far

 private:
  struct File {
    std::string path;
    int fd = -1, direct_fd = -1;  // -1: closed (direct_fd also where O_DIRECT is refused)
    int users = 0;                // threads reading it now: it stays open
    uint64_t last_use = 0;
    bool direct_refused = false;
  };
  struct Chunk {
    size_t range, file;
    int64_t read_at, read_bytes;  // what is read (aligned for O_DIRECT)
    int64_t from, bytes;          // what of it is handed out, from that many bytes into the buffer
    int buffer = -1;
    bool ready = false;
    std::string error;
  };
  void run();
  void read_chunk(Chunk& c, char* buffer);
  // Opens a file for a read (closing the least recently used idle one beyond max_open_); an error
  // text where it cannot. Under mutex_.
  std::string acquire(File& f);
  void release_held();
  void close_files();

  std::vector<Range> ranges_;
  std::vector<File> files_;
  std::vector<Chunk> chunks_;
  size_t buffer_bytes_;
  bool direct_;
  size_t max_open_, open_ = 0, peak_open_ = 0;
  uint64_t uses_ = 0;
  std::vector<IoBuffer> storage_;
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<int> free_;  // buffers
  size_t issued_ = 0;      // chunks handed to a thread
  size_t current_ = 0;     // the chunk next() reads from
  int64_t taken_ = 0;      // bytes of the current chunk handed out
  int held_ = -1;          // the buffer of the last piece handed out
  bool stop_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace shardtune::common
