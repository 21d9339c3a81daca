// A file writer on its own thread with bounded buffers (write_behind.h).
#include "common/write_behind.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common/error.h"

namespace shardtune::common {

WriteBehind::WriteBehind(int buffers, size_t buffer_bytes) : buffer_bytes_(buffer_bytes) {
  ST_CHECK(buffers >= 1 && buffer_bytes > 0, ErrorKind::kInternal, "WriteBehind: {} buffers of {} bytes", buffers,
           buffer_bytes);
  for (int i = 0; i < buffers; ++i) {
    storage_.emplace_back(buffer_bytes);
    free_.push_back(storage_.back().data());
  }
  thread_ = std::thread([this] { run(); });
}

WriteBehind::~WriteBehind() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  changed_.notify_all();
  thread_.join();
}

void WriteBehind::rethrow_locked() {
  if (error_) std::rethrow_exception(error_);
}

char* WriteBehind::take() {
  std::unique_lock<std::mutex> lock(mutex_);
  changed_.wait(lock, [&] { return !free_.empty() || error_; });
  rethrow_locked();
  char* b = free_.back();
  free_.pop_back();
  return b;
}

void WriteBehind::put(char* buffer, size_t bytes, int fd, int64_t offset, const std::string& path) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (error_) {
      free_.push_back(buffer);
      rethrow_locked();
    }
    queue_.push_back({buffer, bytes, fd, offset, path});
  }
  changed_.notify_all();
}

void WriteBehind::finish(int fd, const std::string& path) {
  {
    std::unique_lock<std::mutex> lock(mutex_);
    changed_.wait(lock, [&] { return (queue_.empty() && !busy_) || error_; });
    rethrow_locked();
  }
  ST_CHECK(::fdatasync(fd) == 0, ErrorKind::kIo, "cannot sync {}: {}", path, std::strerror(errno));
}

void WriteBehind::run() {
  for (;;) {
    Job job;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      changed_.wait(lock, [&] { return !queue_.empty() || stopping_; });
      if (queue_.empty()) return;
      job = std::move(queue_.front());
      queue_.pop_front();
      busy_ = true;
    }
    std::exception_ptr failed;
    try {
      const char* p = job.buffer;
      size_t left = job.bytes;
      int64_t at = job.offset;
      while (left > 0) {
        const ssize_t n = ::pwrite(job.fd, p, left, at);
        if (n < 0 && errno == EINTR) continue;
        ST_CHECK(n > 0, ErrorKind::kIo, "cannot write {}: {}", job.path, n < 0 ? std::strerror(errno) : "nothing written");
        p += n;
        left -= static_cast<size_t>(n);
        at += n;
      }
      // The disk starts on these bytes now; the final sync then waits for little.
      ::sync_file_range(job.fd, job.offset, static_cast<off_t>(job.bytes), SYNC_FILE_RANGE_WRITE);
    } catch (...) {
      failed = std::current_exception();
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (failed && !error_) error_ = failed;
      free_.push_back(job.buffer);
      busy_ = false;
    }
    changed_.notify_all();
  }
}

}  // namespace shardtune::common
