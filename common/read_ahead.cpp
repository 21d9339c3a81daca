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
#include "common/open_files.h"

namespace shardtune::common {

ReadAhead::ReadAhead(std::vector<Range> ranges, int buffers, size_t buffer_bytes, int threads, bool direct,
                     size_t max_open)
    : ranges_(std::move(ranges)),
      buffer_bytes_(buffer_bytes),
      direct_(direct),
      max_open_(max_open > 0 ? max_open : open_file_share()) {
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
      if (::access(range.path.c_str(), R_OK) != 0) raise(ErrorKind::kIo, open_failure(range.path, errno));
      files_.push_back({range.path});
    }
    // With O_DIRECT each chunk reads whole aligned blocks of the file, and hands out the range's
    // bytes among them; without it, exactly the range's bytes. Files are opened later, so a file
    // that refuses O_DIRECT is read from the same aligned offsets through the page cache.
    const bool aligned = direct;
    const int64_t end = range.offset + range.bytes;
    const int64_t step = static_cast<int64_t>(buffer_bytes);
    for (int64_t at = aligned ? range.offset / align * align : range.offset; at < end; at += step) {
      const int64_t from = std::max(at, range.offset), to = std::min(at + step, end);
      const int64_t read_end = aligned ? std::min(at + step, (to + align - 1) / align * align) : to;
      chunks_.push_back({r, it->second, at, read_end - at, from - at, to - from, -1, false, {}});
    }
  }
  for (int i = 0; i < buffers; ++i) {
    storage_.push_back(io_buffer(buffer_bytes));
    free_.push_back(i);
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
    if (f.fd >= 0) ::close(f.fd);
  }
  files_.clear();
}

bool ReadAhead::direct() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return direct_ && std::none_of(files_.begin(), files_.end(), [](const File& f) { return f.direct_refused; });
}

size_t ReadAhead::peak_open() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return peak_open_;
}

std::string ReadAhead::acquire(File& f) {
  if (f.fd < 0) {
    while (open_ >= max_open_) {  // close the least recently used file no thread is reading
      File* idle = nullptr;
      for (File& g : files_)
        if (g.fd >= 0 && g.users == 0 && (idle == nullptr || g.last_use < idle->last_use)) idle = &g;
      if (idle == nullptr) break;  // every open file in use: one more, for as long as the read lasts
      if (idle->direct_fd >= 0) ::close(idle->direct_fd);
      ::close(idle->fd);
      idle->fd = idle->direct_fd = -1;
      --open_;
    }
    f.fd = ::open(f.path.c_str(), O_RDONLY | O_CLOEXEC);
    if (f.fd < 0) return open_failure(f.path, errno);
    if (direct_) {
      f.direct_fd = ::open(f.path.c_str(), O_RDONLY | O_CLOEXEC | O_DIRECT);  // -1 where refused
      f.direct_refused = f.direct_fd < 0;
    }
    ::posix_fadvise(f.fd, 0, 0, POSIX_FADV_SEQUENTIAL);
    peak_open_ = std::max(peak_open_, ++open_);
  }
  ++f.users;
  return {};
}

void ReadAhead::read_chunk(Chunk& c, char* buffer) {
  File& f = files_[c.file];
  {
    std::lock_guard<std::mutex> lock(mutex_);
    c.error = acquire(f);
  }
  if (!c.error.empty()) return;
  struct Release {  // the file may be closed again once this read is done
    ReadAhead& self;
    File& f;
    ~Release() {
      std::lock_guard<std::mutex> lock(self.mutex_);
      --f.users;
      f.last_use = ++self.uses_;
    }
  } release{*this, f};
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
