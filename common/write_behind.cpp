// A file writer on its own thread with bounded buffers (write_behind.h).
#include "common/write_behind.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "common/error.h"
#include "common/fault_injection.h"
#include "common/file_io.h"

namespace shardtune::common {

IoBuffer io_buffer(size_t bytes) {
  constexpr size_t kHuge = size_t(2) << 20;
  const size_t alignment = bytes >= kHuge ? kHuge : kDirectAlignment;
  const size_t rounded = (bytes + alignment - 1) / alignment * alignment;
  IoBuffer b(static_cast<char*>(std::aligned_alloc(alignment, rounded)));
  ST_CHECK(b != nullptr, ErrorKind::kIo, "cannot allocate an I/O buffer of {} bytes", rounded);
  if (alignment == kHuge) ::madvise(b.get(), rounded, MADV_HUGEPAGE);  // a hint: without it, ordinary pages
  return b;
}

WriteBehind::WriteBehind(int buffers, size_t buffer_bytes) : buffer_bytes_(buffer_bytes) {
  ST_CHECK(buffers >= 1 && buffer_bytes > 0, ErrorKind::kInternal, "WriteBehind: {} buffers of {} bytes", buffers,
           buffer_bytes);
  for (int i = 0; i < buffers; ++i) {
    storage_.push_back(io_buffer(buffer_bytes));
    free_.push_back(storage_.back().get());
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
    queue_.push_back({buffer, true, bytes, fd, offset, path});
  }
  changed_.notify_all();
}

void WriteBehind::put_borrowed(const void* data, size_t bytes, int fd, int64_t offset, const std::string& path) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    rethrow_locked();
    queue_.push_back({static_cast<char*>(const_cast<void*>(data)), false, bytes, fd, offset, path});
  }
  changed_.notify_all();
}

void WriteBehind::write(const void* data, size_t bytes, int fd, int64_t offset, const std::string& path) {
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    const size_t n = std::min(bytes, buffer_bytes_);
    char* buffer = take();
    std::memcpy(buffer, p, n);
    put(buffer, n, fd, offset, path);
    p += n;
    offset += static_cast<int64_t>(n);
    bytes -= n;
  }
}

void WriteBehind::finish(int fd, const std::string& path, bool sync) {
  {
    std::unique_lock<std::mutex> lock(mutex_);
    // Every queued write runs (after a failure too) before this returns: none may reach the file's
    // descriptor once the caller has closed it, nor read memory lent by put_borrowed after it.
    changed_.wait(lock, [&] { return queue_.empty() && !busy_; });
    rethrow_locked();
  }
  if (sync) slow_io_point("fsync");
  if (sync) ST_CHECK(::fdatasync(fd) == 0, ErrorKind::kIo, "cannot sync {}: {}", path, std::strerror(errno));
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
      pwrite_all(job.fd, job.buffer, job.bytes, job.offset, job.path);
      // The disk starts on these bytes now; the final sync then waits for little.
      ::sync_file_range(job.fd, job.offset, static_cast<off_t>(job.bytes), SYNC_FILE_RANGE_WRITE);
    } catch (...) {
      failed = std::current_exception();
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (failed && !error_) error_ = failed;
      if (job.own) free_.push_back(job.buffer);
      busy_ = false;
    }
    changed_.notify_all();
  }
}

}  // namespace shardtune::common
