// Streaming safetensors writer.
#include "checkpoint/hf/safetensors_stream_writer.h"

#include <ATen/ops/empty.h>
#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "checkpoint/hf/safetensors_torch.h"
#include "common/error.h"

namespace shardtune::checkpoint {
namespace {

using common::ErrorKind;

}  // namespace

SafetensorsStreamWriter::SafetensorsStreamWriter(std::string path, std::vector<StreamedTensor> tensors,
                                                 const std::map<std::string, std::string>& metadata)
    : path_(std::move(path)), tensors_(std::move(tensors)) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (const StreamedTensor& t : tensors_) {
    uint64_t bytes = common::element_size(t.dtype);
    for (int64_t d : t.shape) bytes *= static_cast<uint64_t>(d);
    header[t.name] = {{"dtype", std::string(safetensors_name(t.dtype))},
                      {"shape", t.shape},
                      {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // as the reference writer pads
  file_ = std::make_unique<common::AtomicFile>(path_);
  uint64_t n = text.size();
  unsigned char le[8];
  for (int i = 0; i < 8; ++i) le[i] = static_cast<unsigned char>(n >> (8 * i));
  file_->write(le, 8);
  file_->write(text);
  at_byte_ = 8 + text.size();
  // The tensors' bytes are written behind the caller's reads (4 buffers of 16 MiB), around the page
  // cache where the file system allows it (common/direct_file.h).
  writes_ = std::make_unique<common::DirectWriter>(file_->temporary_path());
}

void SafetensorsStreamWriter::append(const at::Tensor& tensor) {
  ST_CHECK(next_ < tensors_.size() && written_ == 0, ErrorKind::kInternal, "{}: more tensors than declared", path_);
  ST_CHECK(std::vector<int64_t>(tensor.sizes().begin(), tensor.sizes().end()) == tensors_[next_].shape,
           ErrorKind::kInternal, "{}: tensor {} does not have its declared shape", path_, tensors_[next_].name);
  append_elements(tensor.reshape({-1}));
  if (tensor.numel() == 0) ++next_;
}

void SafetensorsStreamWriter::append_elements(const at::Tensor& part) {
  const at::Tensor flat = part.reshape({-1}).contiguous();
  for (int64_t done = 0; done < flat.numel();) {
    ST_CHECK(next_ < tensors_.size(), ErrorKind::kInternal, "{}: more elements than declared", path_);
    const StreamedTensor& t = tensors_[next_];
    int64_t numel = 1;
    for (int64_t d : t.shape) numel *= d;
    int64_t n = std::min(numel - written_, flat.numel() - done);
    const at::ScalarType type = to_scalar_type(t.dtype);
    at::Tensor data = flat.narrow(0, done, n);
    if (flat.scalar_type() != type) {
      // Converted through one reused buffer: a fresh allocation per piece fragments the heap
      // (glibc moves its mmap threshold up after the first free) and the process grows.
      n = std::min(n, kConvertElements);
      if (!staging_.defined() || staging_.scalar_type() != type) staging_ = at::empty({kConvertElements}, type);
      data = staging_.narrow(0, 0, n).copy_(flat.narrow(0, done, n));
    }
    writes_->write(data.data_ptr(), static_cast<size_t>(data.nbytes()), static_cast<int64_t>(at_byte_));
    at_byte_ += static_cast<uint64_t>(data.nbytes());
    done += n;
    written_ += n;
    if (written_ == numel) {
      ++next_;
      written_ = 0;
    }
  }
}

void SafetensorsStreamWriter::finish() {
  ST_CHECK(next_ == tensors_.size() && written_ == 0, ErrorKind::kInternal, "{}: {} of {} tensors written", path_,
           next_, tensors_.size());
  writes_->finish();
  file_->commit();
}

}  // namespace shardtune::checkpoint
