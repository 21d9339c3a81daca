// Reading ranges of tensors from a Hugging Face folder with pread.
#include "checkpoint/hf_tensor_source.h"

#include <ATen/ops/from_blob.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "checkpoint/safetensors_torch.h"
#include "common/error.h"

namespace shardtune::checkpoint {
namespace {

using common::ErrorKind;

// Conversion happens through a buffer of this many bytes at most.
constexpr uint64_t kChunkBytes = 16u << 20;

}  // namespace

HfTensorSource::HfTensorSource(const std::string& dir) : folder_(HfFolder::open(dir)) {}

HfTensorSource::~HfTensorSource() {
  for (auto& [path, fd] : fds_) ::close(fd);
}

std::vector<SourceTensor> HfTensorSource::tensors() const {
  std::vector<SourceTensor> out;
  for (const std::string& name : folder_.tensor_names()) {
    const TensorInfo& info = folder_.info(name);
    out.push_back({name, info.dtype, info.shape});
  }
  return out;
}

int HfTensorSource::fd_of(const std::string& path) {
  auto it = fds_.find(path);
  if (it != fds_.end()) return it->second;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  ST_CHECK(fd >= 0, ErrorKind::kIo, "cannot open {}: {}", path, std::strerror(errno));
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
  fds_.emplace(path, fd);
  return fd;
}

void HfTensorSource::pread_exactly(int fd, const std::string& path, uint64_t offset, uint64_t length, void* dst) {
  auto* out = static_cast<char*>(dst);
  uint64_t done = 0;
  while (done < length) {
    const ssize_t n = ::pread(fd, out + done, length - done, static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    ST_CHECK(n > 0, ErrorKind::kIo, "reading {} bytes at offset {} of {}: {}", length, offset + done, path,
             n == 0 ? "unexpected end of file" : std::strerror(errno));
    done += static_cast<uint64_t>(n);
  }
  bytes_read_ += length;
}

void HfTensorSource::read(const std::string& name, int64_t offset, int64_t count, at::ScalarType dtype, void* dst) {
  const SafetensorsFile& file = folder_.file_of(name);
  const TensorInfo& info = file.at(name);
  const uint64_t esize = st_dtype_size(info.dtype);
  ST_CHECK(offset >= 0 && count >= 0 && static_cast<uint64_t>(offset + count) * esize <= info.nbytes,
           ErrorKind::kInternal, "{}: elements [{}, {}) are outside tensor {}", file.path(), offset, offset + count, name);
  const int fd = fd_of(file.path());
  const uint64_t begin = info.data_begin + static_cast<uint64_t>(offset) * esize;
  const at::ScalarType stored = to_scalar_type(info.dtype);
  if (stored == dtype) {
    pread_exactly(fd, file.path(), begin, static_cast<uint64_t>(count) * esize, dst);
    return;
  }
  // Convert chunk by chunk: the buffer stays small whatever the tensor.
  const int64_t per_chunk = static_cast<int64_t>(kChunkBytes / esize);
  chunk_.resize(std::max(chunk_.size(), static_cast<size_t>(std::min<int64_t>(count, per_chunk)) * esize));
  const int64_t out_esize = static_cast<int64_t>(c10::elementSize(dtype));
  for (int64_t done = 0; done < count;) {
    const int64_t n = std::min(per_chunk, count - done);
    pread_exactly(fd, file.path(), begin + static_cast<uint64_t>(done) * esize, static_cast<uint64_t>(n) * esize,
                  chunk_.data());
    at::from_blob(static_cast<char*>(dst) + done * out_esize, {n}, at::TensorOptions().dtype(dtype))
        .copy_(at::from_blob(chunk_.data(), {n}, at::TensorOptions().dtype(stored)));
    done += n;
  }
}

}  // namespace shardtune::checkpoint
