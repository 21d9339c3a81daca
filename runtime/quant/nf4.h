// NF4: 4-bit NormalFloat quantisation with double-quantised scales, bit for bit as bitsandbytes
// stores it (the choices of its CUDA kernels, which quantise the published checkpoints):
//  - blocks of `block_size` elements over the weight flattened row-major, the last one partial;
//    an fp32 absmax (max |x|) per block; each element x * (1 / absmax) takes the NF4 code whose
//    kernel threshold it exceeds last (strictly); two codes per byte, the first in the high nibble;
//  - double quantisation: offset = the mean of the tensor's absmax values; (absmax - offset) in
//    blocks of 256 with the signed 8-bit dynamic map, one fp32 absmax2 per 256 blocks;
//  - dequantisation: absmax = fp32(map[q] * absmax2) then fp32(+ offset); w = fp32(NF4[c] * absmax),
//    rounded once to the compute dtype. No fused multiply-add anywhere (compiled -ffp-contract=off).
// docs/qlora.md says where bitsandbytes' other backends differ and what the offset's rounding is.
//
// For sharding, a tensor is cut into super-blocks of 256 blocks (the span of one absmax2), each
// stored as one self-contained record: its codes, then its 256 scale bytes (double quantisation:
// the 8-bit scales, absmax2 and the tensor's offset; otherwise 256 fp32 absmax). A record never
// depends on another, so any run of whole records can be a rank's shard, and the records of a
// tensor are bitsandbytes' own bytes regrouped. Past a tensor's end the codes are 0x77 (NF4 code 7,
// zero): padding dequantises to 0. Plain C++: no LibTorch.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace shardtune::quant {

inline constexpr int64_t kNestedBlock = 256;  // blocks per absmax2, and so per record
inline constexpr uint8_t kZeroCodes = 0x77;   // two NF4 zeros

// The 16 NF4 values (index = code) and bitsandbytes' signed 8-bit dynamic map (256 ascending
// values, create_dynamic_map(signed=True) as torch's float32 linspace computes it).
const std::array<float, 16>& nf4_values();
const std::array<float, 256>& dynamic_map();

// The code of one normalised value: NF4 by the kernel's thresholds (x > T[k], NaN gives 0), and the
// 8-bit code by its binary search (nearest value, a tie to the even index).
uint8_t nf4_code(float normed);
uint8_t dynamic_code(float normed);

// Whether `name` is a weight QLoRA stores in NF4: a projection of a decoder block
// ("model.layers.N.self_attn.q_proj.weight" ... "mlp.down_proj.weight"). bitsandbytes quantises
// every Linear; embeddings, norms, biases and (by default) the head stay as they are.
bool is_nf4_weight(const std::string& name);

struct Nf4Format {
  int64_t block_size = 64;  // 32 .. 4096, a power of two
  bool double_quant = true;
  int64_t record_elements() const { return block_size * kNestedBlock; }
  int64_t code_bytes() const { return record_elements() / 2; }
  int64_t scale_bytes() const { return double_quant ? kNestedBlock + 8 : kNestedBlock * 4; }
  int64_t record_bytes() const { return code_bytes() + scale_bytes(); }
  // Records a tensor of `numel` elements takes.
  int64_t records(int64_t numel) const { return (numel + record_elements() - 1) / record_elements(); }
};

// Throws common::Error(kConfig) for a block size bitsandbytes does not have.
void check_format(const Nf4Format& format);

// The exact sum of non-negative finite floats, kept as integer counts per binary exponent: the
// same whatever the order of additions or how they are split among ranks (merge = add the bins).
class ExactSum {
 public:
  static constexpr int kBins = 255;
  void add(float v);
  void merge(const ExactSum& o);
  int64_t* bins() { return bins_.data(); }
  // The sum, rounded by one fixed sequence of operations: the same bins give the same double.
  double value() const;

 private:
  std::array<int64_t, kBins> bins_{};
};

// Per-block absmax of `valid` elements (blocks of format.block_size; the last one partial) into
// `out`, each also added to `sum`. Throws common::Error(kData) at a non-finite element, naming its
// index within `x`.
void block_absmax(const float* x, int64_t valid, const Nf4Format& format, float* out, ExactSum* sum);

// The tensor's offset (double quantisation): its blocks' mean absmax, from their exact sum.
float mean_absmax(const ExactSum& sum, int64_t blocks);

// Quantises `count` whole records of one tensor: `x` holds the elements from a record boundary,
// `valid` of them real (the tensor ends there; the rest is padding and is not read). `offset`:
// mean_absmax over the whole tensor (ignored without double quantisation).
void quantize_records(const float* x, int64_t valid, int64_t count, float offset, const Nf4Format& format,
                      uint8_t* out);

// Records quantised without double quantisation (fp32 absmax per block), as a rank makes them
// before the tensor's offset is known, turned into `format`'s double-quantised records: the same
// bytes quantise_records would have made with that offset.
void double_quantize_records(const uint8_t* single, int64_t valid, int64_t count, float offset,
                             const Nf4Format& format, uint8_t* out);

// fp32 values of `count` records (count x record_elements), before rounding to a compute dtype.
void dequantize_records(const uint8_t* records, int64_t count, const Nf4Format& format, float* out);

// A whole tensor as bitsandbytes stores it (Params4bit's data and QuantState).
struct BnbTensor {
  std::vector<uint8_t> packed;   // (numel + 1) / 2
  std::vector<float> absmax;     // per block, without double quantisation
  std::vector<uint8_t> qabsmax;  // per block, with it
  std::vector<float> absmax2;    // per 256 blocks, with it
  float offset = 0;
};

BnbTensor quantize_tensor(const float* x, int64_t numel, const Nf4Format& format);

// Records from bitsandbytes' arrays, each pointer at the first record's part: packed codes, then
// absmax (without double quantisation) or qabsmax and absmax2 (with it). `valid`: the tensor's
// elements from the first record on. For reading a pre-quantised folder a slice at a time.
void pack_records(const uint8_t* packed, const float* absmax, const uint8_t* qabsmax, const float* absmax2,
                  float offset, int64_t valid, int64_t count, const Nf4Format& format, uint8_t* out);
// The tensor's records, and back (`numel` real elements).
std::vector<uint8_t> records_from_bnb(const BnbTensor& t, int64_t numel, const Nf4Format& format);
BnbTensor bnb_from_records(const uint8_t* records, int64_t numel, const Nf4Format& format);

}  // namespace shardtune::quant
