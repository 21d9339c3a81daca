// LibTorch side of safetensors: tensors are copied out of the mapping one at a time on read and
// streamed with write(2) on write, so neither direction ever holds a whole file in memory.
#include "checkpoint/hf/safetensors_torch.h"

#include <ATen/ops/empty.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <torch/version.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>

#include "common/atomic_file.h"
#include "common/error.h"

// Float8 scalar types arrived in PyTorch 2.1.
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 1)
#define ST_TORCH_HAS_FLOAT8 1
#else
#define ST_TORCH_HAS_FLOAT8 0
#endif

namespace shardtune::checkpoint {
namespace {

std::optional<at::ScalarType> scalar_type_of(common::Dtype dtype) {
  switch (dtype) {
    case common::Dtype::kF64: return at::kDouble;
    case common::Dtype::kF32: return at::kFloat;
    case common::Dtype::kF16: return at::kHalf;
    case common::Dtype::kBF16: return at::kBFloat16;
    case common::Dtype::kI64: return at::kLong;
    case common::Dtype::kI32: return at::kInt;
    case common::Dtype::kI16: return at::kShort;
    case common::Dtype::kI8: return at::kChar;
    case common::Dtype::kU8: return at::kByte;
    case common::Dtype::kBool: return at::kBool;
#if ST_TORCH_HAS_FLOAT8
    case common::Dtype::kF8E4M3: return at::ScalarType::Float8_e4m3fn;
    case common::Dtype::kF8E5M2: return at::ScalarType::Float8_e5m2;
#else
    case common::Dtype::kF8E4M3:
    case common::Dtype::kF8E5M2: return std::nullopt;
#endif
  }
  return std::nullopt;
}

std::optional<common::Dtype> st_dtype_of(at::ScalarType type) {
  switch (type) {
    case at::kDouble: return common::Dtype::kF64;
    case at::kFloat: return common::Dtype::kF32;
    case at::kHalf: return common::Dtype::kF16;
    case at::kBFloat16: return common::Dtype::kBF16;
    case at::kLong: return common::Dtype::kI64;
    case at::kInt: return common::Dtype::kI32;
    case at::kShort: return common::Dtype::kI16;
    case at::kChar: return common::Dtype::kI8;
    case at::kByte: return common::Dtype::kU8;
    case at::kBool: return common::Dtype::kBool;
#if ST_TORCH_HAS_FLOAT8
    case at::ScalarType::Float8_e4m3fn: return common::Dtype::kF8E4M3;
    case at::ScalarType::Float8_e5m2: return common::Dtype::kF8E5M2;
#endif
    default: return std::nullopt;
  }
}

std::string unsupported_dtype_message(common::Dtype dtype) {
  return fmt::format("dtype {} has no LibTorch scalar type in LibTorch {} (float8 needs LibTorch 2.1 or newer)",
                     safetensors_name(dtype), TORCH_VERSION);
}

std::string unsupported_scalar_type_message(at::ScalarType type) {
  return fmt::format("LibTorch dtype {} cannot be stored in safetensors (supported: float64, float32, float16, "
                     "bfloat16, int64, int32, int16, int8, uint8, bool{})",
                     c10::toString(type), ST_TORCH_HAS_FLOAT8 ? ", float8_e4m3fn, float8_e5m2" : "");
}

[[noreturn]] void raise_errno(const std::string& what, const std::string& path, int err) {
  common::raise(common::ErrorKind::kIo, fmt::format("writing safetensors file {}: {} failed: {}", path, what,
                                                    std::strerror(err)));
}

void write_all(int fd, const void* data, uint64_t n, const std::string& path, std::string_view what) {
  // write(2) moves at most about 2 GiB per call on Linux; larger tensors take several.
  constexpr uint64_t kMaxChunk = 1ull << 30;
  const auto* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = ::write(fd, p, std::min(n, kMaxChunk));
    if (w < 0) {
      if (errno == EINTR) continue;
      raise_errno(fmt::format("write of {}", what), path, errno);
    }
    p += w;
    n -= static_cast<uint64_t>(w);
  }
}


}  // namespace

at::ScalarType to_scalar_type(common::Dtype dtype) {
  const auto type = scalar_type_of(dtype);
  if (!type) common::raise(common::ErrorKind::kIo, unsupported_dtype_message(dtype));
  return *type;
}

common::Dtype to_st_dtype(at::ScalarType type) {
  const auto dtype = st_dtype_of(type);
  if (!dtype) common::raise(common::ErrorKind::kIo, unsupported_scalar_type_message(type));
  return *dtype;
}

at::Tensor read_tensor(const SafetensorsFile& file, std::string_view name) {
  const TensorInfo& info = file.at(name);
  const auto type = scalar_type_of(info.dtype);
  if (!type) {
    common::raise(common::ErrorKind::kIo, fmt::format("safetensors file {}: tensor \"{}\": {}", file.path(), name,
                                                      unsupported_dtype_message(info.dtype)));
  }
  at::Tensor out = at::empty(info.shape, at::TensorOptions().dtype(*type));
  if (info.nbytes == 0) return out;
  file.read_bytes(info, 0, info.nbytes, out.data_ptr());
  if (info.dtype == common::Dtype::kBool) {
    // LibTorch assumes bool bytes are 0 or 1; any other value is a corrupt file, not a true.
    const auto* bytes = static_cast<const uint8_t*>(out.data_ptr());
    for (uint64_t i = 0; i < info.nbytes; ++i) {
      if (bytes[i] > 1) {
        common::raise(common::ErrorKind::kIo,
                      fmt::format("safetensors file {}: tensor \"{}\" (BOOL) has byte value {} at element {} (file "
                                  "offset {}); BOOL elements must be 0 or 1",
                                  file.path(), name, bytes[i], i, info.data_begin + i));
      }
    }
  }
  return out;
}

void write_safetensors(const std::string& path, const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  // The header first: every tensor is checked before a byte is written.
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::set<std::string_view> seen;
  std::vector<uint64_t> sizes;
  uint64_t offset = 0;
  for (const auto& [name, tensor] : tensors) {
    auto fail = [&](const std::string& why) {
      common::raise(common::ErrorKind::kIo,
                    fmt::format("writing safetensors file {}: tensor \"{}\": {}", path, name, why));
    };
    if (name == "__metadata__") fail("the name \"__metadata__\" is reserved for the metadata entry");
    if (!seen.insert(name).second) fail("the name appears twice in the list of tensors to write");
    if (!tensor.defined()) fail("the tensor is undefined");
    if (tensor.layout() != at::kStrided) fail("only dense (strided) tensors can be written, not sparse ones");
    const auto dtype = st_dtype_of(tensor.scalar_type());
    if (!dtype) fail(unsupported_scalar_type_message(tensor.scalar_type()));
    const uint64_t nbytes = static_cast<uint64_t>(tensor.numel()) * common::element_size(*dtype);
    header[name] = {{"dtype", safetensors_name(*dtype)},
                    {"shape", tensor.sizes().vec()},
                    {"data_offsets", {offset, offset + nbytes}}};
    sizes.push_back(nbytes);
    offset += nbytes;
  }
  std::string text = header.dump();
  // As the reference writer does: pad with spaces so the data area starts 8-byte aligned.
  text.append((8 - text.size() % 8) % 8, ' ');
  const uint64_t header_len = text.size();

  common::AtomicFile tmp(path);
  write_all(tmp.fd(), &header_len, 8, path, "the header length");
  write_all(tmp.fd(), text.data(), text.size(), path, "the header");
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (sizes[i] == 0) continue;
    const at::Tensor data = tensors[i].second.cpu().contiguous();
    ST_CHECK(static_cast<uint64_t>(data.nbytes()) == sizes[i], common::ErrorKind::kInternal,
             "writing safetensors file {}: tensor \"{}\" has {} bytes after contiguous(), expected {}", path,
             tensors[i].first, data.nbytes(), sizes[i]);
    write_all(tmp.fd(), data.data_ptr(), sizes[i], path, fmt::format("tensor \"{}\"", tensors[i].first));
  }
  tmp.commit();
}

}  // namespace shardtune::checkpoint
