// NF4 quantisation and dequantisation, bitsandbytes' arithmetic operation by operation.
#include "runtime/quant/nf4.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "common/error.h"
#include "common/lora_targets.h"
#include "runtime/quant/dynamic_map.h"

namespace shardtune::quant {
namespace {

using common::ErrorKind;

// bitsandbytes' dQuantizeNF4 thresholds, the float literals of its CUDA kernel (not all of them
// are the fp32 midpoints of neighbouring values).
constexpr std::array<float, 15> kNf4Thresholds = {
    -0.8480964004993439f, -0.6106329262256622f, -0.4599952697753906f, -0.33967943489551544f,
    -0.23460740596055984f, -0.13791173323988914f, -0.045525018125772476f, 0.03979014977812767f,
    0.1202552504837513f,  0.2035212516784668f,   0.2920137718319893f,   0.3893125355243683f,
    0.5016634166240692f,  0.6427869200706482f,   0.8614784181118011f};

int64_t div_up(int64_t a, int64_t b) { return (a + b - 1) / b; }

// One record's 256 block maxima, fp32, for the `valid` real elements at x (0 for absent blocks).
void record_absmax(const float* x, int64_t valid, const Nf4Format& f, float* out) {
  for (int64_t b = 0; b < kNestedBlock; ++b) {
    const int64_t begin = b * f.block_size, end = std::min(valid, begin + f.block_size);
    float m = 0.0f;
    for (int64_t i = begin; i < end; ++i) m = std::max(m, std::fabs(x[i]));
    out[b] = m;
  }
}

// The codes of one record: `valid` real elements, zero codes after them.
void record_codes(const float* x, int64_t valid, const float* absmax, const Nf4Format& f, uint8_t* codes) {
  std::memset(codes, kZeroCodes, static_cast<size_t>(f.code_bytes()));
  for (int64_t i = 0; i < valid; i += 2) {
    const float inv = 1.0f / absmax[i / f.block_size];
    // An odd tensor's last byte codes the zero bitsandbytes pads its block with.
    const float second = i + 1 < valid ? x[i + 1] : 0.0f;
    codes[i / 2] = static_cast<uint8_t>(nf4_code(x[i] * inv) << 4 | nf4_code(second * inv));
  }
}

// The double-quantised scales of one record: (absmax - offset) of its `blocks` real blocks in
// 8 bits against their largest magnitude, absmax2, and the offset; 0 for absent blocks.
void double_quantize(const float* absmax, int64_t blocks, float offset, uint8_t* scales) {
  std::array<float, kNestedBlock> centred{};
  float absmax2 = 0.0f;
  for (int64_t b = 0; b < blocks; ++b) {
    centred[b] = absmax[b] - offset;
    absmax2 = std::max(absmax2, std::fabs(centred[b]));
  }
  const float inv = 1.0f / absmax2;
  for (int64_t b = 0; b < kNestedBlock; ++b) scales[b] = b < blocks ? dynamic_code(centred[b] * inv) : 0;
  std::memcpy(scales + kNestedBlock, &absmax2, 4);
  std::memcpy(scales + kNestedBlock + 4, &offset, 4);
}

}  // namespace

const std::array<float, 16>& nf4_values() {
  static const std::array<float, 16> values = {
      -1.0f, -0.6961928009986877f, -0.5250730514526367f, -0.39491748809814453f, -0.28444138169288635f,
      -0.18477343022823334f, -0.09105003625154495f, 0.0f, 0.07958029955625534f, 0.16093020141124725f,
      0.24611230194568634f, 0.33791524171829224f, 0.44070982933044434f, 0.5626170039176941f,
      0.7229568362236023f, 1.0f};
  return values;
}

const std::array<float, 256>& dynamic_map() { return dynamic_map(true); }

uint8_t nf4_code(float normed) {
  uint8_t code = 0;
  for (float t : kNf4Thresholds) code = static_cast<uint8_t>(code + (normed > t ? 1 : 0));
  return code;
}

// bitsandbytes' dQuantize<0>: a binary search to an even pivot, then the nearer of it and the
// neighbour on the value's side, by an fp32 midpoint.
uint8_t dynamic_code(float x) { return search_code(dynamic_map(), x, -1.0f, /*ends_from_map=*/true); }

bool is_nf4_weight(const std::string& name) {
  // "model.layers.<N>.<self_attn|mlp>.<projection>.weight"
  if (name.rfind("model.layers.", 0) != 0) return false;
  for (std::string_view module : common::kLoraBlockModules) {
    const std::string suffix = "." + std::string(module) + ".weight";
    if (name.size() > suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0) return true;
  }
  return false;
}

void check_format(const Nf4Format& format) {
  const int64_t b = format.block_size;
  ST_CHECK(b >= 32 && b <= 4096 && (b & (b - 1)) == 0, ErrorKind::kConfig,
           "NF4 block size {}: bitsandbytes has 32, 64, 128, 256, 512, 1024, 2048 and 4096", b);
}

void ExactSum::add(float v) {
  uint32_t bits = 0;
  std::memcpy(&bits, &v, sizeof bits);
  const int exponent = static_cast<int>((bits >> 23) & 0xff);
  ST_CHECK(exponent < 255 && (bits >> 31) == 0, ErrorKind::kInternal, "exact sum of {}", v);
  const int64_t mantissa = (bits & 0x7fffff) | (exponent > 0 ? 0x800000 : 0);
  bins_[static_cast<size_t>(std::max(exponent, 1))] += mantissa;  // value = mantissa * 2^(bin - 150)
}

void ExactSum::merge(const ExactSum& o) {
  for (size_t i = 0; i < bins_.size(); ++i) bins_[i] += o.bins_[i];
}

double ExactSum::value() const {
  double sum = 0;
  for (int i = 0; i < kBins; ++i) sum += std::ldexp(static_cast<double>(bins_[static_cast<size_t>(i)]), i - 150);
  return sum;
}

void block_absmax(const float* x, int64_t valid, const Nf4Format& format, float* out, ExactSum* sum) {
  for (int64_t i = 0; i < valid; ++i)
    ST_CHECK(std::isfinite(x[i]), ErrorKind::kConfig, "element {} is {}: NF4 quantises finite weights only", i, x[i]);
  for (int64_t b = 0; b * format.block_size < valid; ++b) {
    const int64_t begin = b * format.block_size, end = std::min(valid, begin + format.block_size);
    float m = 0.0f;
    for (int64_t i = begin; i < end; ++i) m = std::max(m, std::fabs(x[i]));
    out[b] = m;
    if (sum != nullptr) sum->add(m);
  }
}

float mean_absmax(const ExactSum& sum, int64_t blocks) {
  return blocks == 0 ? 0.0f : static_cast<float>(sum.value() / static_cast<double>(blocks));
}

void quantize_records(const float* x, int64_t valid, int64_t count, float offset, const Nf4Format& f, uint8_t* out) {
  std::array<float, kNestedBlock> absmax{};
  for (int64_t r = 0; r < count; ++r) {
    const int64_t real = std::clamp<int64_t>(valid - r * f.record_elements(), 0, f.record_elements());
    const float* xr = x + r * f.record_elements();
    uint8_t* rec = out + r * f.record_bytes();
    record_absmax(xr, real, f, absmax.data());
    record_codes(xr, real, absmax.data(), f, rec);
    uint8_t* scales = rec + f.code_bytes();
    if (f.double_quant) {
      double_quantize(absmax.data(), div_up(real, f.block_size), offset, scales);
    } else {
      std::memcpy(scales, absmax.data(), sizeof absmax);
    }
  }
}

void double_quantize_records(const uint8_t* single, int64_t valid, int64_t count, float offset, const Nf4Format& f,
                             uint8_t* out) {
  const Nf4Format from{f.block_size, false};
  std::array<float, kNestedBlock> absmax{};
  for (int64_t r = 0; r < count; ++r) {
    const int64_t real = std::clamp<int64_t>(valid - r * f.record_elements(), 0, f.record_elements());
    const uint8_t* in = single + r * from.record_bytes();
    uint8_t* rec = out + r * f.record_bytes();
    std::memcpy(rec, in, static_cast<size_t>(f.code_bytes()));
    std::memcpy(absmax.data(), in + f.code_bytes(), sizeof absmax);
    double_quantize(absmax.data(), div_up(real, f.block_size), offset, rec + f.code_bytes());
  }
}

void dequantize_records(const uint8_t* records, int64_t count, const Nf4Format& f, float* out) {
  const std::array<float, 16>& nf4 = nf4_values();
  const std::array<float, 256>& map = dynamic_map();
  std::array<float, kNestedBlock> absmax{};
  for (int64_t r = 0; r < count; ++r) {
    const uint8_t* rec = records + r * f.record_bytes();
    const uint8_t* scales = rec + f.code_bytes();
    if (f.double_quant) {
      float absmax2 = 0, offset = 0;
      std::memcpy(&absmax2, scales + kNestedBlock, 4);
      std::memcpy(&offset, scales + kNestedBlock + 4, 4);
      for (int64_t b = 0; b < kNestedBlock; ++b) {
        const float scaled = map[scales[b]] * absmax2;  // two roundings, as two kernels do it
        absmax[b] = scaled + offset;
      }
    } else {
      std::memcpy(absmax.data(), scales, sizeof absmax);
    }
    float* o = out + r * f.record_elements();
    for (int64_t i = 0; i < f.code_bytes(); ++i) {
      const float a = absmax[(2 * i) / f.block_size];
      o[2 * i] = nf4[rec[i] >> 4] * a;
      o[2 * i + 1] = nf4[rec[i] & 15] * a;
    }
  }
}

BnbTensor quantize_tensor(const float* x, int64_t numel, const Nf4Format& f) {
  const int64_t blocks = div_up(numel, f.block_size);
  std::vector<float> absmax(static_cast<size_t>(blocks));
  ExactSum sum;
  block_absmax(x, numel, f, absmax.data(), &sum);
  const int64_t count = f.records(numel);
  std::vector<uint8_t> records(static_cast<size_t>(count * f.record_bytes()));
  quantize_records(x, numel, count, mean_absmax(sum, blocks), f, records.data());
  return bnb_from_records(records.data(), numel, f);
}

void pack_records(const uint8_t* packed, const float* absmax, const uint8_t* qabsmax, const float* absmax2,
                  float offset, int64_t valid, int64_t count, const Nf4Format& f, uint8_t* out) {
  for (int64_t r = 0; r < count; ++r) {
    const int64_t real = std::clamp<int64_t>(valid - r * f.record_elements(), 0, f.record_elements());
    const int64_t blocks = div_up(real, f.block_size);
    uint8_t* rec = out + r * f.record_bytes();
    std::memset(rec, kZeroCodes, static_cast<size_t>(f.code_bytes()));
    std::memcpy(rec, packed + r * f.code_bytes(), static_cast<size_t>(div_up(real, 2)));
    uint8_t* scales = rec + f.code_bytes();
    std::memset(scales, 0, static_cast<size_t>(f.scale_bytes()));
    if (f.double_quant) {
      std::memcpy(scales, qabsmax + r * kNestedBlock, static_cast<size_t>(blocks));
      std::memcpy(scales + kNestedBlock, absmax2 + r, 4);
      std::memcpy(scales + kNestedBlock + 4, &offset, 4);
    } else {
      std::memcpy(scales, absmax + r * kNestedBlock, static_cast<size_t>(blocks) * 4);
    }
  }
}

std::vector<uint8_t> records_from_bnb(const BnbTensor& t, int64_t numel, const Nf4Format& f) {
  std::vector<uint8_t> out(static_cast<size_t>(f.records(numel) * f.record_bytes()));
  pack_records(t.packed.data(), t.absmax.data(), t.qabsmax.data(), t.absmax2.data(), t.offset, numel,
               f.records(numel), f, out.data());
  return out;
}

BnbTensor bnb_from_records(const uint8_t* records, int64_t numel, const Nf4Format& f) {
  BnbTensor t;
  const int64_t blocks = div_up(numel, f.block_size), count = f.records(numel);
  t.packed.resize(static_cast<size_t>(div_up(numel, 2)));
  if (f.double_quant) {
    t.qabsmax.resize(static_cast<size_t>(blocks));
    t.absmax2.resize(static_cast<size_t>(count));
  } else {
    t.absmax.resize(static_cast<size_t>(blocks));
  }
  for (int64_t r = 0; r < count; ++r) {
    const uint8_t* rec = records + r * f.record_bytes();
    const int64_t real = std::min(numel - r * f.record_elements(), f.record_elements());
    const int64_t nb = div_up(real, f.block_size);
    std::memcpy(t.packed.data() + r * f.code_bytes(), rec, static_cast<size_t>(div_up(real, 2)));
    const uint8_t* scales = rec + f.code_bytes();
    if (f.double_quant) {
      std::memcpy(t.qabsmax.data() + r * kNestedBlock, scales, static_cast<size_t>(nb));
      std::memcpy(t.absmax2.data() + r, scales + kNestedBlock, 4);
      std::memcpy(&t.offset, scales + kNestedBlock + 4, 4);
    } else {
      std::memcpy(t.absmax.data() + r * kNestedBlock, scales, static_cast<size_t>(nb) * 4);
    }
  }
  return t;
}

}  // namespace shardtune::quant
