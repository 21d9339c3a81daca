#include "checkpoint/gguf_writer.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "common/atomic_file.h"
#include "common/error.h"

namespace shardtune::checkpoint {
namespace {

using common::ErrorKind;

// GGUF's metadata value types.
enum : uint32_t { kU32 = 4, kI32 = 5, kF32 = 6, kBool = 7, kString = 8, kArray = 9 };

template <class T>
void put(std::vector<uint8_t>& out, T value) {
  const auto* p = reinterpret_cast<const uint8_t*>(&value);  // little-endian, as GGUF is
  out.insert(out.end(), p, p + sizeof(T));
}

void put_string(std::vector<uint8_t>& out, const std::string& s) {
  put<uint64_t>(out, s.size());
  out.insert(out.end(), s.begin(), s.end());
}

uint64_t padded(uint64_t n, uint64_t alignment) { return (n + alignment - 1) / alignment * alignment; }

// IEEE half, round to nearest even (ggml's GGML_FP32_TO_FP16).
uint16_t to_f16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t abs = x & 0x7FFFFFFFu;
  if (abs > 0x7F800000u) return static_cast<uint16_t>(sign | 0x7E00u);  // NaN
  if (abs >= 0x477FF000u) return static_cast<uint16_t>(sign | 0x7C00u);  // rounds to infinity (or is)
  if (abs < 0x38800000u) {  // a subnormal half (or zero): round abs / 2^-24 to an integer, ties to even
    float magnitude;
    const uint32_t a = abs;
    std::memcpy(&magnitude, &a, 4);
    const float scaled = magnitude * 16777216.0f;  // exact: a power of two
    uint32_t q = static_cast<uint32_t>(scaled);
    const float rest = scaled - static_cast<float>(q);
    if (rest > 0.5f || (rest == 0.5f && (q & 1u))) ++q;
    return static_cast<uint16_t>(sign | q);
  }
  // Normal: rebias the exponent, round the 13 dropped mantissa bits to nearest even.
  const uint32_t rebased = abs - 0x38000000u;
  const uint32_t kept = rebased >> 13, dropped = rebased & 0x1FFFu;
  uint32_t h = kept;
  if (dropped > 0x1000u || (dropped == 0x1000u && (kept & 1u))) ++h;
  return static_cast<uint16_t>(sign | h);
}

uint16_t to_bf16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  if ((x & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((x >> 16) | 64u);  // a quiet NaN
  return static_cast<uint16_t>((x + 0x7FFFu + ((x >> 16) & 1u)) >> 16);
}

}  // namespace

const char* ggml_type_name(GgmlType type) {
  switch (type) {
    case GgmlType::kF32: return "f32";
    case GgmlType::kF16: return "f16";
    case GgmlType::kBF16: return "bf16";
  }
  return "?";
}

uint64_t ggml_bytes(GgmlType type, int64_t values) {
  return static_cast<uint64_t>(values) * (type == GgmlType::kF32 ? 4u : 2u);
}

void encode_values(const float* x, int64_t n, GgmlType type, uint8_t* out) {
  switch (type) {
    case GgmlType::kF32:
      std::memcpy(out, x, static_cast<size_t>(n) * 4);
      return;
    case GgmlType::kF16:
      for (int64_t i = 0; i < n; ++i) {
        const uint16_t h = to_f16(x[i]);
        std::memcpy(out + 2 * i, &h, 2);
      }
      return;
    case GgmlType::kBF16:
      for (int64_t i = 0; i < n; ++i) {
        const uint16_t h = to_bf16(x[i]);
        std::memcpy(out + 2 * i, &h, 2);
      }
      return;
  }
}

struct GgufWriter::File {
  explicit File(const std::string& path) : out(path) {}
  common::AtomicFile out;
  uint64_t written = 0;
  void write(const void* data, uint64_t n) {
    out.write(data, n);
    written += n;
  }
  void pad_to(uint64_t alignment) {
    static const uint8_t zeros[64] = {};
    write(zeros, padded(written, alignment) - written);
  }
};

GgufWriter::GgufWriter(std::string path) : path_(std::move(path)) {}
GgufWriter::~GgufWriter() = default;

void GgufWriter::key(const std::string& name, uint32_t type) {
  ST_CHECK(!begun_, ErrorKind::kInternal, "GGUF metadata {} added after the header was written", name);
  ST_CHECK(std::find(keys_.begin(), keys_.end(), name) == keys_.end(), ErrorKind::kInternal,
           "GGUF metadata key {} given twice", name);
  keys_.push_back(name);
  put_string(metadata_, name);
  put<uint32_t>(metadata_, type);
}

void GgufWriter::add_u32(const std::string& name, uint32_t value) {
  key(name, kU32);
  put(metadata_, value);
}
void GgufWriter::add_f32(const std::string& name, float value) {
  key(name, kF32);
  put(metadata_, value);
}
void GgufWriter::add_bool(const std::string& name, bool value) {
  key(name, kBool);
  put<uint8_t>(metadata_, value ? 1 : 0);
}
void GgufWriter::add_string(const std::string& name, const std::string& value) {
  key(name, kString);
  put_string(metadata_, value);
}
void GgufWriter::add_strings(const std::string& name, const std::vector<std::string>& values) {
  key(name, kArray);
  put<uint32_t>(metadata_, kString);
  put<uint64_t>(metadata_, values.size());
  for (const std::string& v : values) put_string(metadata_, v);
}
void GgufWriter::add_i32s(const std::string& name, const std::vector<int32_t>& values) {
  key(name, kArray);
  put<uint32_t>(metadata_, kI32);
  put<uint64_t>(metadata_, values.size());
  for (int32_t v : values) put(metadata_, v);
}
void GgufWriter::add_f32s(const std::string& name, const std::vector<float>& values) {
  key(name, kArray);
  put<uint32_t>(metadata_, kF32);
  put<uint64_t>(metadata_, values.size());
  for (float v : values) put(metadata_, v);
}

void GgufWriter::add_tensor(const std::string& name, const std::vector<int64_t>& shape, GgmlType type) {
  ST_CHECK(!begun_, ErrorKind::kInternal, "GGUF tensor {} added after the header was written", name);
  ST_CHECK(!name.empty() && name.size() < 64, ErrorKind::kInternal, "GGUF tensor name {} is not 1 to 63 bytes", name);
  ST_CHECK(!shape.empty() && shape.size() <= 4, ErrorKind::kInternal, "GGUF tensor {} has {} dimensions", name,
           shape.size());
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  const uint64_t bytes = ggml_bytes(type, n);
  tensors_.push_back({name, shape, type, data_bytes_, bytes});
  data_bytes_ += padded(bytes, kAlignment);
}

void GgufWriter::begin() {
  file_ = std::make_unique<File>(path_);
  std::vector<uint8_t> head;
  head.insert(head.end(), {'G', 'G', 'U', 'F'});
  put<uint32_t>(head, 3);
  put<uint64_t>(head, tensors_.size());
  put<uint64_t>(head, keys_.size());
  head.insert(head.end(), metadata_.begin(), metadata_.end());
  for (const Tensor& t : tensors_) {
    put_string(head, t.name);
    put<uint32_t>(head, static_cast<uint32_t>(t.shape.size()));
    for (auto d = t.shape.rbegin(); d != t.shape.rend(); ++d) put<uint64_t>(head, static_cast<uint64_t>(*d));  // ne[0] innermost
    put<uint32_t>(head, static_cast<uint32_t>(t.type));
    put<uint64_t>(head, t.offset);
  }
  file_->write(head.data(), head.size());
  file_->pad_to(kAlignment);
  begun_ = true;
}

void GgufWriter::write_tensor(const uint8_t* data, uint64_t bytes) {
  ST_CHECK(begun_ && next_ < tensors_.size(), ErrorKind::kInternal, "a GGUF tensor written out of turn");
  const Tensor& t = tensors_[next_];
  ST_CHECK(bytes == t.bytes, ErrorKind::kInternal, "GGUF tensor {}: {} bytes given, {} expected", t.name, bytes, t.bytes);
  ++next_;
  file_->write(data, bytes);
  file_->pad_to(kAlignment);
}

void GgufWriter::commit() {
  ST_CHECK(begun_ && next_ == tensors_.size(), ErrorKind::kInternal, "GGUF file committed with {} of {} tensors written",
           next_, tensors_.size());
  file_->out.commit();
}

}  // namespace shardtune::checkpoint
