// NF4 records (runtime/quant/nf4.h) as tensors: a frozen flat parameter of a QLoRA base keeps its
// shard as uint8 records, all-gathers them packed, and dequantises them into its compute buffer
// with tensor operations, so the same code runs on the CPU and on a GPU.
#pragma once

#include <ATen/core/Tensor.h>

#include <string>

#include "runtime/fsdp/shard_layout.h"
#include "runtime/quant/nf4.h"

namespace shardtune::fsdp {

// Throws common::Error(kConfig) naming `name` and the element (counted from `first`) when `x`
// (float, on the host) holds a NaN or an infinity: NF4 quantises finite weights only.
void check_finite(const at::Tensor& x, const std::string& name, int64_t first);

// `count` records that dequantise to zeros (a shard's padding), uint8 with `options`' device.
at::Tensor padding_records(int64_t count, const quant::Nf4Format& format, const at::TensorOptions& options);

// The records of `shard` in `layout` (aligned to format.record_elements()) quantised from each
// parameter's full values (`values[i]`, any dtype and device; each parameter's offset from all of
// its blocks, so every rank computes the same bytes). uint8 on the host.
at::Tensor quantize_shard(const FlatLayout& layout, int shard, const std::vector<at::Tensor>& values,
                          const quant::Nf4Format& format);

// Dequantises uint8 records (1-D, a whole number of records) into `out` (1-D, records x
// record_elements, the compute dtype, on the records' device): fp32 products rounded once to
// out's dtype, as bitsandbytes does, a bounded chunk of records at a time.
void dequantize_into(const at::Tensor& records, const quant::Nf4Format& format, at::Tensor& out);

}  // namespace shardtune::fsdp
