// O_DIRECT writes of a laid-out file (direct_file.h).
#include "common/direct_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>

#include "common/error.h"
#include "common/open_files.h"

namespace shardtune::common {
namespace {

int64_t round_up(int64_t v) {
  const auto a = static_cast<int64_t>(kDirectAlignment);
  return (v + a - 1) / a * a;
}
int64_t round_down(int64_t v) { return v / static_cast<int64_t>(kDirectAlignment) * static_cast<int64_t>(kDirectAlignment); }

}  // namespace

DirectWriter::DirectWriter(std::string path, WriteBehind* shared)
    : path_(std::move(path)),
      own_(shared == nullptr ? std::make_unique<WriteBehind>(kDirectBuffers, kDirectBufferBytes) : nullptr),
      behind_(shared != nullptr ? *shared : *own_) {
  fd_ = ::open(path_.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd_ < 0) raise(ErrorKind::kIo, open_failure(path_, errno) + " (for writing)");
  direct_fd_ = ::open(path_.c_str(), O_WRONLY | O_CLOEXEC | O_DIRECT);  // -1 where refused (tmpfs): buffered only
}

DirectWriter::~DirectWriter() {
  // A write still queued must not reach a closed (or reused) descriptor.
  if (fd_ >= 0) {
    try {
      behind_.finish(fd_, path_);
    } catch (...) {  // unwinding already
    }
  }
  if (direct_fd_ >= 0) ::close(direct_fd_);
  if (fd_ >= 0) ::close(fd_);
}

void DirectWriter::write(const void* data, size_t bytes, int64_t offset) { write(data, bytes, offset, false); }

void DirectWriter::write_in_place(const void* data, size_t bytes, int64_t offset) {
  const auto phase = [](uint64_t v) { return v % kDirectAlignment; };
  write(data, bytes, offset, phase(reinterpret_cast<uintptr_t>(data)) == phase(static_cast<uint64_t>(offset)));
}

void DirectWriter::write(const void* data, size_t bytes, int64_t offset, bool borrow) {
  const char* p = static_cast<const char*>(data);
  const int64_t end = offset + static_cast<int64_t>(bytes);
  const int64_t first = direct() ? std::min(round_up(offset), end) : end;
  const int64_t last = direct() ? std::max(round_down(end), first) : end;
  if (first > offset) behind_.write(p, static_cast<size_t>(first - offset), fd_, offset, path_);
  const size_t chunk = behind_.buffer_bytes() / kDirectAlignment * kDirectAlignment;
  for (int64_t at = first; at < last;) {
    const size_t n = std::min(chunk, static_cast<size_t>(last - at));  // a multiple of the alignment
    if (borrow) {  // p + (at - offset) is aligned as well
      behind_.put_borrowed(p + (at - offset), n, direct_fd_, at, path_);
      bytes_in_place_ += n;
    } else {
      char* buffer = behind_.take();
      std::memcpy(buffer, p + (at - offset), n);
      behind_.put(buffer, n, direct_fd_, at, path_);
    }
    at += static_cast<int64_t>(n);
  }
  if (end > last) behind_.write(p + (last - offset), static_cast<size_t>(end - last), fd_, last, path_);
}

void DirectWriter::finish() {
  behind_.finish(fd_, path_);  // fdatasync: the buffered bytes, the file's size, the disk's own cache
  ST_CHECK(::close(fd_) == 0, ErrorKind::kIo, "cannot close {}: {}", path_, std::strerror(errno));
  fd_ = -1;
}

void DirectWriter::close() {
  behind_.finish(fd_, path_, false);
  ST_CHECK(::close(fd_) == 0, ErrorKind::kIo, "cannot close {}: {}", path_, std::strerror(errno));
  fd_ = -1;
}

}  // namespace shardtune::common
