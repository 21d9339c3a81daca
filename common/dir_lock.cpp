#include "common/dir_lock.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/error.h"

namespace shardtune::common {

std::string dir_lock_path(const std::string& output_dir) { return output_dir + "/" + kDirLockName; }

bool same_directory(const std::string& a, const std::string& b) {
  struct stat sa {}, sb {};
  return ::stat(a.c_str(), &sa) == 0 && ::stat(b.c_str(), &sb) == 0 && sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

std::string this_process() {
  char host[256] = {};
  if (::gethostname(host, sizeof(host) - 1) != 0) std::strcpy(host, "?");
  return fmt::format("{} pid {}", host, ::getpid());
}

namespace {

// What the holder wrote, on one line; "another process" when it wrote nothing (yet).
std::string holder_note(const std::string& path) {
  std::ifstream in(path);
  std::string note;
  std::getline(in, note);
  if (note.size() > 300) note.resize(300);
  return note.empty() ? "another process" : note;
}

}  // namespace

DirLock DirLock::try_acquire(const std::string& output_dir, const std::string& holder) {
  std::error_code ec;
  std::filesystem::create_directories(output_dir, ec);
  ST_CHECK(!ec, ErrorKind::kIo, "cannot create the directory {}: {}", output_dir, ec.message());
  const std::string path = dir_lock_path(output_dir);
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  ST_CHECK(fd >= 0, ErrorKind::kIo, "cannot open the lock file {}: {}", path, std::strerror(errno));
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    ::close(fd);
    if (err == EWOULDBLOCK) return DirLock(-1, Outcome::kRefused, holder_note(path));
    return DirLock(-1, Outcome::kUnsupported, fmt::format("cannot lock {}: {}", path, std::strerror(err)));
  }
  // The note is informational: a lock whose note cannot be written is still held.
  const std::string note = holder + "\n";
  if (::ftruncate(fd, 0) == 0) {
    const ssize_t written = ::pwrite(fd, note.data(), note.size(), 0);
    (void)written;
  }
  return DirLock(fd, Outcome::kHeld, "");
}

DirLock::DirLock(DirLock&& other) noexcept
    : fd_(other.fd_), outcome_(other.outcome_), detail_(std::move(other.detail_)) {
  other.fd_ = -1;
}

DirLock::~DirLock() {
  if (fd_ >= 0) ::close(fd_);  // closing the last descriptor of the lock releases it
}

void DirLock::keep_across_exec() {
  if (fd_ < 0) return;
  const int flags = ::fcntl(fd_, F_GETFD);
  ST_CHECK(flags >= 0 && ::fcntl(fd_, F_SETFD, flags & ~FD_CLOEXEC) == 0, ErrorKind::kIo,
           "cannot keep the output directory lock across exec: {}", std::strerror(errno));
}

}  // namespace shardtune::common
