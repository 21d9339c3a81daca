// Atomic, durable file writes.
#include "common/atomic_file.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "common/error.h"
#include "common/fault_injection.h"
#include "common/interrupt_cleanup.h"

namespace shardtune::common {
namespace {

std::string temporary_name(const std::string& path) {
  static std::atomic<uint64_t> counter{0};
  return fmt::format("{}.tmp.{}.{}", path, ::getpid(), counter++);
}

std::string parent_of(const std::string& path) {
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  return parent.empty() ? std::string(".") : parent.string();
}

}  // namespace

AtomicFile::AtomicFile(std::string path) : path_(std::move(path)), tmp_(temporary_name(path_)) {
  std::error_code ec;
  std::filesystem::create_directories(parent_of(path_), ec);
  ST_CHECK(!ec, ErrorKind::kIo, "cannot create the directory of {}: {}", path_, ec.message());
  fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  ST_CHECK(fd_ >= 0, ErrorKind::kIo, "cannot write {} (temporary file {}): {}", path_, tmp_, std::strerror(errno));
  registered_ = register_temporary(tmp_);
}

AtomicFile::~AtomicFile() {
  forget_temporary(registered_);
  if (fd_ >= 0) ::close(fd_);
  if (!committed_) ::unlink(tmp_.c_str());
}

void AtomicFile::write(const void* data, size_t size) {
  ST_CHECK(fd_ >= 0, ErrorKind::kInternal, "write to {} after commit", path_);
  const auto* p = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t n = ::write(fd_, p, size);
    if (n < 0 && errno == EINTR) continue;
    ST_CHECK(n > 0, ErrorKind::kIo, "cannot write {}: {}", path_, n < 0 ? std::strerror(errno) : "no progress");
    p += n;
    size -= static_cast<size_t>(n);
  }
}

void AtomicFile::commit() {
  ST_CHECK(fd_ >= 0, ErrorKind::kInternal, "{} committed twice", path_);
  ST_CHECK(::fsync(fd_) == 0, ErrorKind::kIo, "cannot fsync {}: {}", tmp_, std::strerror(errno));
  const int fd = fd_;
  fd_ = -1;
  ST_CHECK(::close(fd) == 0, ErrorKind::kIo, "cannot close {}: {}", tmp_, std::strerror(errno));
  ST_CHECK(::rename(tmp_.c_str(), path_.c_str()) == 0, ErrorKind::kIo, "cannot rename {} to {}: {}", tmp_, path_,
           std::strerror(errno));
  committed_ = true;
  fsync_path(parent_of(path_), true);
}

void fsync_path(const std::string& path, bool directory) {
  slow_io_point("fsync");
  const int fd = ::open(path.c_str(), (directory ? O_RDONLY | O_DIRECTORY : O_RDONLY) | O_CLOEXEC);
  ST_CHECK(fd >= 0, ErrorKind::kIo, "cannot open {} to fsync it: {}", path, std::strerror(errno));
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  ST_CHECK(rc == 0, ErrorKind::kIo, "fsync of {} failed: {}", path, std::strerror(err));
}

}  // namespace shardtune::common
