// Reading ranges of tensors from a Hugging Face folder with pread.
#include "checkpoint/hf/hf_tensor_source.h"

#include <ATen/ops/from_blob.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <tuple>

#include <cerrno>
#include <cstring>

#include "checkpoint/hf/safetensors_torch.h"
#include "common/error.h"

namespace shardtune::checkpoint {
namespace {

using common::ErrorKind;

// Conversion happens through a buffer of this many bytes at most.
constexpr uint64_t kChunkBytes = 16u << 20;

}  // namespace

HfTensorSource::HfTensorSource(const std::string& dir) : folder_(HfFolder::open(dir)) {
  if (is_bnb_4bit(folder_)) nf4_ = read_bnb_nf4_weights(folder_);
}

std::map<std::string, fsdp::Nf4Stored> HfTensorSource::nf4_weights() const {
  std::map<std::string, fsdp::Nf4Stored> out;
  for (const auto& [name, w] : nf4_) out.emplace(name, fsdp::Nf4Stored{w.shape, w.format});
  return out;
}

void HfTensorSource::read_nf4_records(const std::string& name, int64_t first, int64_t count, uint8_t* out) {
  const auto it = nf4_.find(name);
  ST_CHECK(it != nf4_.end(), ErrorKind::kInternal, "{} is not stored in NF4 in {}", name, folder_.dir());
  read_bnb_records(folder_, it->second, first, count, out, &bytes_read_);
}

bool HfTensorSource::nf4_storage(const std::string& name) const { return !nf4_.empty() && is_bnb_storage_tensor(name); }

HfTensorSource::~HfTensorSource() {
  for (auto& [path, fd] : fds_) ::close(fd);
}

std::vector<fsdp::SourceTensor> HfTensorSource::tensors() const {
  std::vector<fsdp::SourceTensor> out;
  for (const std::string& name : folder_.tensor_names()) {
    const TensorInfo& info = folder_.info(name);
    std::optional<at::ScalarType> trainable;
    if (common::is_floating(info.dtype)) trainable = to_scalar_type(info.dtype);
    out.push_back({name, std::string(safetensors_name(info.dtype)), trainable, info.shape});
  }
  return out;
}

std::vector<std::string> HfTensorSource::storage_order() const {
  std::vector<std::string> names = folder_.tensor_names();
  auto position = [&](const std::string& name) {
    return std::make_pair(std::string_view(folder_.file_of(name).path()), folder_.info(name).data_begin);
  };
  std::sort(names.begin(), names.end(),
            [&](const std::string& a, const std::string& b) { return position(a) < position(b); });
  return names;
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
  const uint64_t esize = common::element_size(info.dtype);
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

void HfTensorSource::prefetch(const std::vector<fsdp::ReadRequest>& requests) {
  for (const fsdp::ReadRequest& r : requests) {
    const SafetensorsFile& file = folder_.file_of(*r.name);
    const TensorInfo& info = file.at(*r.name);
    const uint64_t esize = common::element_size(info.dtype);
    ::posix_fadvise(fd_of(file.path()), static_cast<off_t>(info.data_begin + static_cast<uint64_t>(r.offset) * esize),
                    static_cast<off_t>(static_cast<uint64_t>(r.count) * esize), POSIX_FADV_WILLNEED);
  }
}

void HfTensorSource::read_batch(std::vector<fsdp::ReadRequest> requests) {
  struct Located {
    const fsdp::ReadRequest* request;
    const SafetensorsFile* file;
    uint64_t begin, bytes;
    bool raw;  // stored in the requested dtype
  };
  std::vector<Located> order;
  for (const fsdp::ReadRequest& r : requests) {
    const SafetensorsFile& file = folder_.file_of(*r.name);
    const TensorInfo& info = file.at(*r.name);
    const uint64_t esize = common::element_size(info.dtype);
    order.push_back({&r, &file, info.data_begin + static_cast<uint64_t>(r.offset) * esize,
                     static_cast<uint64_t>(r.count) * esize, to_scalar_type(info.dtype) == r.dtype});
  }
  std::sort(order.begin(), order.end(), [](const Located& a, const Located& b) {
    return std::tie(a.file->path(), a.begin) < std::tie(b.file->path(), b.begin);
  });
  std::vector<iovec> run;
  for (size_t i = 0; i < order.size();) {
    const Located& first = order[i];
    if (!first.raw) {
      read(*first.request->name, first.request->offset, first.request->count, first.request->dtype,
           first.request->dst);
      ++i;
      continue;
    }
    // The run of raw ranges that follow each other in the file, read by one preadv.
    run.clear();
    uint64_t end = first.begin;
    size_t j = i;
    for (; j < order.size() && order[j].raw && order[j].file == first.file && order[j].begin == end &&
           run.size() < IOV_MAX;
         ++j) {
      run.push_back({order[j].request->dst, order[j].bytes});
      end += order[j].bytes;
    }
    const int fd = fd_of(first.file->path());
    for (uint64_t done = 0; done < end - first.begin;) {
      const ssize_t n = ::preadv(fd, run.data(), static_cast<int>(run.size()), static_cast<off_t>(first.begin + done));
      if (n < 0 && errno == EINTR) continue;
      ST_CHECK(n > 0, ErrorKind::kIo, "reading {} bytes at offset {} of {}: {}", end - first.begin - done,
               first.begin + done, first.file->path(), n == 0 ? "unexpected end of file" : std::strerror(errno));
      done += static_cast<uint64_t>(n);
      // Drop what was read from the front of the vector.
      for (size_t left = static_cast<size_t>(n); left > 0;) {
        if (run.front().iov_len <= left) {
          left -= run.front().iov_len;
          run.erase(run.begin());
        } else {
          run.front().iov_base = static_cast<char*>(run.front().iov_base) + left;
          run.front().iov_len -= left;
          left = 0;
        }
      }
    }
    bytes_read_ += end - first.begin;
    i = j;
  }
}

}  // namespace shardtune::checkpoint
