// Hugging Face folders quantised by bitsandbytes (`load_in_4bit`, then save_pretrained): each
// quantised Linear X stores
//   X.weight                                 packed NF4 codes, (n + 1) / 2 bytes (any storage dtype)
//   X.weight.absmax                          uint8 per block (double quantisation) or fp32
//   X.weight.quant_map                       the 16 NF4 values
//   X.weight.nested_absmax, .nested_quant_map   fp32 absmax2 per 256 blocks, the 8-bit map
//   X.weight.quant_state.bitsandbytes__nf4   uint8: JSON with quant_type, blocksize, dtype, shape,
//                                            nested_blocksize, nested_dtype, nested_offset
// Read here, checked against bitsandbytes' own format (NF4, not FP4; its value tables; nested
// blocks of 256), and turned into shardtune's NF4 records (runtime/quant/nf4.h) a slice at a time.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "checkpoint/hf/hf_folder.h"
#include "runtime/quant/nf4.h"

namespace shardtune::checkpoint {

struct BnbNf4Weight {
  std::string name;  // "model.layers.0.self_attn.q_proj.weight"
  std::vector<int64_t> shape;
  int64_t numel = 0;
  quant::Nf4Format format;
  float offset = 0;  // nested_offset (double quantisation)
};

// Whether config.json declares a bitsandbytes 4-bit model (quantization_config with quant_method
// "bitsandbytes" and load_in_4bit).
bool is_bnb_4bit(const HfFolder& folder);

// Every weight the folder stores in 4 bits, checked. Throws common::Error(kConfig) naming the
// tensor and the field at anything shardtune would not dequantise exactly as bitsandbytes does:
// FP4, a value table that is not bitsandbytes', nested blocks other than 256, sizes that do not
// match the shape.
std::map<std::string, BnbNf4Weight> read_bnb_nf4_weights(const HfFolder& folder);

// Whether `tensor` is part of a 4-bit weight's storage (absmax, maps, quantisation state).
bool is_bnb_storage_tensor(const std::string& tensor);

// Records [first, first + count) of `w`, read from the folder's files, into `out`
// (count x w.format.record_bytes()). Adds the bytes read to `*bytes_read`.
void read_bnb_records(const HfFolder& folder, const BnbNf4Weight& w, int64_t first, int64_t count, uint8_t* out,
                      uint64_t* bytes_read);

}  // namespace shardtune::checkpoint
