// Planned reads ahead of the caller (read_ahead.h).
#include "common/read_ahead.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fmt/format.h>
#include <map>

#include "common/error.h"

namespace shardtune::common {

ReadAhead::ReadAhead(std::vector<Range> ranges, int buffers, size_t buffer_bytes, int threads, bool direct)
    : ranges_(std::move(ranges)), buffer_bytes_(buffer_bytes) {
  const auto align = static_cast<int64_t>(kDirectAlignment);
  ST_CHECK(buffers >= 1 && threads >= 1 && buffer_bytes >= kDirectAlignment && buffer_bytes % kDirectAlignment == 0,
           ErrorKind::kInternal, "ReadAhead: {} buffers of {} bytes on {} threads", buffers, buffer_bytes, threads);
  std::map<std::string, size_t> file_of;
  for (size_t r = 0; r < ranges_.size(); ++r) {
    const Range& range = ranges_[r];
    ST_CHECK(range.offset >= 0 && range.bytes >= 0, ErrorKind::kInternal, "ReadAhead: bytes {}..{} of {}",
             range.offset, range.offset + range.bytes, range.path);
    if (range.bytes == 0) continue;
    auto [it, fresh] = file_of.emplace(range.path, files_.size());
    if (fresh) {
      File f{range.path, ::open(range.path.c_str(), O_RDONLY | O_CLOEXEC), -1};
      if (f.fd < 0) {
        const int error = errno;
        close_files();  // no destructor runs for a constructor that throws
        raise(ErrorKind::kIo, fmt::format("cannot open {}: {}", range.path, std::strerror(error)));
      }
      if (direct) f.direct_fd = ::open(range.path.c_str(), O_RDONLY | O_CLOEXEC | O_DIRECT);  // -1 where refused
      ::posix_fadvise(f.fd, 0, 0, POSIX_FADV_SEQUENTIAL);
      files_.push_back(f);
    }
    const bool aligned = files_[it->second].direct_fd >= 0;
    const int64_t end = range.offset + range.bytes;
    // With O_DIRECT each chunk reads whole aligned blocks of the file, and hands out the range's
    // bytes among them; without it, exactly the range's bytes.
    const int64_t step = static_cast<int64_t>(buffer_bytes);
    for (int64_t at = aligned ? range.offset / align * align : range.offset; at < end; at += step) {
      const int64_t from = std::max(at, range.offset), to = std::min(at + step, end);
      const int64_t read_end = aligned ? std::min(at + step, (to + align - 1) / align * align) : to;
      chunks_.push_back({r, it->second, at, read_end - at, from - at, to - from, -1, false, {}});
    }
  }
  try {
    for (int i = 0; i < buffers; ++i) {
      storage_.push_back(io_buffer(buffer_bytes));
      free_.push_back(i);
    }
  } catch (...) {
    close_files();  // no destructor runs for a constructor that throws
    throw;
  }
  for (int i = 0; i < threads; ++i) threads_.emplace_back([this] { run(); });
}

ReadAhead::~ReadAhead() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  changed_.notify_all();
  for (std::thread& t : threads_) t.join();
  close_files();
}

void ReadAhead::close_files() {
  for (File& f : files_) {
    if (f.direct_fd >= 0) ::close(f.direct_fd);
    ::close(f.fd);
  }
  files_.clear();
}

bool ReadAhead::direct() const {
  return std::all_of(files_.begin(), files_.end(), [](const File& f) { return f.direct_fd >= 0; });
}

void ReadAhead::read_chunk(Chunk& c, char* buffer) {
  const File& f = files_[c.file];
  int fd = f.direct_fd >= 0 ? f.direct_fd : f.fd;
  const int64_t needed = c.from + c.bytes;  // the aligned tail past the file's end may be missing
  int64_t done = 0;
  while (done < c.read_bytes) {
    const ssize_t n = ::pread(fd, buffer + done, static_cast<size_t>(c.read_bytes - done), c.read_at + done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EINVAL && fd == f.direct_fd) {  // opened with O_DIRECT, yet refused it
      fd = f.fd;
      continue;
    }
    if (n < 0) {
      c.error = fmt::format("reading {} bytes at offset {} of {}: {}", c.read_bytes - done, c.read_at + done, f.path,
                            std::strerror(errno));
      return;
    }
    if (n == 0) break;
    done += n;
  }
  if (done < needed)
    c.error = fmt::format("{} ends at byte {}, before the {} bytes at offset {} it should hold", f.path,
                          c.read_at + done, c.bytes, c.read_at + c.from);
}

void ReadAhead::run() {
  for (;;) {
    size_t index;
    int buffer;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      changed_.wait(lock, [&] { return stop_ || issued_ == chunks_.size() || !free_.empty(); });
      if (stop_ || issued_ == chunks_.size()) return;
      index = issued_++;
      buffer = free_.back();
      free_.pop_back();
      chunks_[index].buffer = buffer;
    }
    Chunk& c = chunks_[index];  // this thread's alone until it is marked ready
    read_chunk(c, storage_[static_cast<size_t>(buffer)].get());
    {
      std::lock_guard<std::mutex> lock(mutex_);
      c.ready = true;
    }
    changed_.notify_all();
  }
}

void ReadAhead::release_held() {
  if (held_ < 0) return;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    free_.push_back(held_);
  }
  held_ = -1;
  changed_.notify_all();
}

ReadAhead::Piece ReadAhead::next(size_t range, size_t max) {
  release_held();
  for (;;) {
    if (current_ == chunks_.size() || chunks_[current_].range > range || max == 0) return {};
    Chunk& c = chunks_[current_];
    {
      std::unique_lock<std::mutex> lock(mutex_);
      changed_.wait(lock, [&] { return c.ready; });
    }
    if (c.range < range) {  // passed by
      held_ = c.buffer;
      release_held();
      ++current_;
      taken_ = 0;
      continue;
    }
    if (!c.error.empty()) raise(ErrorKind::kIo, c.error);
    const int64_t n = std::min(static_cast<int64_t>(max), c.bytes - taken_);
    const Piece piece{storage_[static_cast<size_t>(c.buffer)].get() + c.from + taken_, static_cast<size_t>(n)};
    taken_ += n;
    if (taken_ == c.bytes) {  // handed out whole: its buffer is freed by the next call
      held_ = c.buffer;
      ++current_;
      taken_ = 0;
    }
    return piece;
  }
}

}  // namespace shardtune::common
