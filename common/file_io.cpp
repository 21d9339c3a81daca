#include "common/file_io.h"

#include "common/atomic_file.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace shardtune::common {

std::string read_file(const std::string& path, ErrorKind kind, const std::string& what) {
  std::ifstream in(path, std::ios::binary);
  const std::string name = what.empty() ? path : what + " " + path;
  ST_CHECK(in, kind, "cannot read {}: {}", name, std::strerror(errno));
  std::ostringstream text;
  text << in.rdbuf();
  ST_CHECK(!in.bad(), kind, "cannot read {}: the read failed", name);
  return text.str();
}

void write_file_atomically(const std::string& path, const std::string& text) {
  write_file_atomically(path, [&](int fd, const std::string& tmp) { write_all(fd, text.data(), text.size(), tmp); });
}

void write_file_atomically(const std::string& path, const std::function<void(int fd, const std::string& tmp)>& fill) {
  AtomicFile file(path);
  fill(file.fd(), file.temporary_path());
  file.commit();
}

void write_all(int fd, const void* data, size_t size, const std::string& path) {
  const auto* p = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t n = ::write(fd, p, size);
    if (n < 0 && errno == EINTR) continue;
    ST_CHECK(n > 0, ErrorKind::kIo, "cannot write {}: {}", path, std::strerror(errno));
    p += n;
    size -= static_cast<size_t>(n);
  }
}

void pwrite_all(int fd, const void* data, size_t size, int64_t offset, const std::string& path) {
  const auto* p = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t n = ::pwrite(fd, p, size, offset);
    if (n < 0 && errno == EINTR) continue;
    ST_CHECK(n > 0, ErrorKind::kIo, "cannot write {}: {}", path, n < 0 ? std::strerror(errno) : "nothing written");
    p += n;
    size -= static_cast<size_t>(n);
    offset += n;
  }
}

}  // namespace shardtune::common
