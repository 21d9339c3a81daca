// Whole-file reads and complete writes, with errors that name the file.
#pragma once

#include <cstddef>
#include <functional>
#include <cstdint>
#include <string>

#include "common/error.h"

namespace shardtune::common {

// The bytes of `path`. Throws Error(kind) "cannot read <what> <path>: <reason>".
std::string read_file(const std::string& path, ErrorKind kind = ErrorKind::kIo, const std::string& what = "");

// Writes `text` to `path` through an AtomicFile (common/atomic_file.h): whole or not at all,
// durable once this returns.
void write_file_atomically(const std::string& path, const std::string& text);
// The same with the contents written by `fill(fd, temporary_path)` (through write_all): for
// files built in parts.
void write_file_atomically(const std::string& path, const std::function<void(int fd, const std::string& tmp)>& fill);

// Writes all `size` bytes to `fd` (retrying short writes and EINTR). Throws Error(kIo) naming `path`.
void write_all(int fd, const void* data, size_t size, const std::string& path);
// The same at byte `offset` of `fd` (pwrite: the file position is not used).
void pwrite_all(int fd, const void* data, size_t size, int64_t offset, const std::string& path);

}  // namespace shardtune::common
