// SafetensorsFile: mmap-based reading, so that a 70B-parameter shard costs memory only for the
// tensors a rank actually touches (DESIGN.md, invariant 5: no rank holds the whole model).
#include "checkpoint/hf/safetensors_file.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "common/error.h"
#include "common/mapping_guard.h"

namespace shardtune::checkpoint {
namespace {

[[noreturn]] void raise_errno(const std::string& what, const std::string& path, int err) {
  common::raise(common::ErrorKind::kIo, fmt::format("safetensors file {}: {} failed: {}", path, what, std::strerror(err)));
}

// Closes the descriptor on every path out of open(); the mapping outlives it.
struct FdGuard {
  int fd;
  ~FdGuard() {
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace

SafetensorsFile SafetensorsFile::open(const std::string& path) {
  FdGuard fd{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
  if (fd.fd < 0) raise_errno("open", path, errno);
  struct stat st {};
  if (::fstat(fd.fd, &st) != 0) raise_errno("fstat", path, errno);
  if (!S_ISREG(st.st_mode)) {
    common::raise(common::ErrorKind::kIo, fmt::format("safetensors file {}: not a regular file", path));
  }
  const auto size = static_cast<uint64_t>(st.st_size);
  if (size < 8) {
    // mmap of an empty file fails with EINVAL; let the header check say what is wrong instead.
    std::byte small[8]{};
    if (size > 0 && ::pread(fd.fd, small, size, 0) != static_cast<ssize_t>(size)) raise_errno("read", path, errno);
    parse_safetensors_header(std::span<const std::byte>(small, size), path);
  }
  void* base = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd.fd, 0);
  if (base == MAP_FAILED) raise_errno(fmt::format("mmap of {} bytes", size), path, errno);
  // Tensors are read selectively, often by several ranks each taking a part: kernel readahead of
  // neighbouring tensors would only waste page cache and I/O bandwidth.
  ::madvise(base, size, MADV_RANDOM);
  SafetensorsFile file(path, static_cast<const std::byte*>(base), size);
  file.guard_ = common::guard_mapping(base, size, path);
  file.header_ = parse_safetensors_header(std::span<const std::byte>(file.base_, size), path);
  for (size_t i = 0; i < file.header_.tensors.size(); ++i) file.index_.emplace(file.header_.tensors[i].name, i);
  return file;
}

SafetensorsFile::SafetensorsFile(std::string path, const std::byte* base, uint64_t size)
    : path_(std::move(path)), base_(base), size_(size) {}

SafetensorsFile::SafetensorsFile(SafetensorsFile&& other) noexcept
    : path_(std::move(other.path_)),
      base_(std::exchange(other.base_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      guard_(std::exchange(other.guard_, -1)),
      header_(std::move(other.header_)),
      index_(std::move(other.index_)) {}

SafetensorsFile& SafetensorsFile::operator=(SafetensorsFile&& other) noexcept {
  if (this != &other) {
    unmap();
    path_ = std::move(other.path_);
    base_ = std::exchange(other.base_, nullptr);
    size_ = std::exchange(other.size_, 0);
    guard_ = std::exchange(other.guard_, -1);
    header_ = std::move(other.header_);
    index_ = std::move(other.index_);
  }
  return *this;
}

SafetensorsFile::~SafetensorsFile() { unmap(); }

void SafetensorsFile::unmap() noexcept {
  common::release_mapping(std::exchange(guard_, -1));
  if (base_ != nullptr) ::munmap(const_cast<std::byte*>(base_), size_);
  base_ = nullptr;
}

const TensorInfo* SafetensorsFile::find(std::string_view name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &header_.tensors[it->second];
}

const TensorInfo& SafetensorsFile::at(std::string_view name) const {
  const TensorInfo* info = find(name);
  if (info == nullptr) {
    common::raise(common::ErrorKind::kIo, fmt::format("safetensors file {}: tensor \"{}\" is not in file ({} tensors)",
                                                      path_, name, header_.tensors.size()));
  }
  return *info;
}

// A TensorInfo from another file (or a copy with edited offsets) would index outside the mapping.
void SafetensorsFile::check_owned(const TensorInfo& tensor) const {
  const TensorInfo* own = find(tensor.name);
  ST_CHECK(own != nullptr && own->data_begin == tensor.data_begin && own->nbytes == tensor.nbytes,
           common::ErrorKind::kInternal,
           "safetensors file {}: tensor \"{}\" (file bytes [{}, {})) was passed a TensorInfo that does not come "
           "from this file", path_, tensor.name, tensor.data_begin, tensor.data_begin + tensor.nbytes);
}

std::span<const std::byte> SafetensorsFile::bytes(const TensorInfo& tensor) const {
  check_owned(tensor);
  return {base_ + tensor.data_begin, tensor.nbytes};
}

void SafetensorsFile::read_bytes(const TensorInfo& tensor, uint64_t offset, uint64_t length, void* dst) const {
  check_owned(tensor);
  if (offset > tensor.nbytes || length > tensor.nbytes - offset) {
    common::raise(common::ErrorKind::kIo,
                  fmt::format("safetensors file {}: tensor \"{}\" has {} bytes (file bytes [{}, {})); the requested "
                              "byte range [{}, {} + {}) is not inside it",
                              path_, tensor.name, tensor.nbytes, tensor.data_begin, tensor.data_begin + tensor.nbytes,
                              offset, offset, length));
  }
  if (length == 0) return;
  const std::byte* src = base_ + tensor.data_begin + offset;
  // MADV_RANDOM turned readahead off; ask for exactly this range up front instead of faulting one
  // page at a time.
  const auto page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const auto first = reinterpret_cast<uintptr_t>(src) & ~(page - 1);
  ::madvise(reinterpret_cast<void*>(first), reinterpret_cast<uintptr_t>(src) + length - first, MADV_WILLNEED);
  std::memcpy(dst, src, length);
}

}  // namespace shardtune::checkpoint
