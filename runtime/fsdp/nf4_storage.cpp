// NF4 records as tensors.
#include "runtime/fsdp/nf4_storage.h"

#include <ATen/ops/empty.h>
#include <ATen/ops/from_blob.h>
#include <ATen/ops/index_select.h>
#include <ATen/ops/mul.h>
#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <array>
#include <map>
#include <cmath>
#include <cstring>

#include "common/error.h"

namespace shardtune::fsdp {
namespace {

// What dequantising needs on one device, kept between calls: the fp32 values of every code byte
// (its high nibble's, then its low nibble's), the 8-bit map, and scratch for a chunk of codes as
// indices and their values. Dequantising every unit at every gather would otherwise allocate and
// free tens of MiB each time, which the host allocator keeps resident.
struct Workspace {
  at::Tensor pairs, map;     // (256, 2) and (256,) fp32
  at::Tensor index, values;  // grown to the largest chunk: int64 per code byte, fp32 per weight
};

Workspace& workspace(const at::Device& device) {
  static thread_local std::map<std::string, Workspace> by_device;
  Workspace& w = by_device[device.str()];
  if (!w.pairs.defined()) {
    std::array<float, 512> pairs{};
    const std::array<float, 16>& nf4 = quant::nf4_values();
    for (size_t b = 0; b < 256; ++b) {
      pairs[2 * b] = nf4[b >> 4];
      pairs[2 * b + 1] = nf4[b & 15];
    }
    const at::TensorOptions f32 = at::TensorOptions().dtype(at::kFloat);
    auto upload = [&](const float* data, at::IntArrayRef shape) {
      return at::from_blob(const_cast<float*>(data), shape, f32).to(f32.device(device), /*non_blocking=*/false, /*copy=*/true);
    };
    w.pairs = upload(pairs.data(), {256, 2});
    w.map = upload(quant::dynamic_map().data(), {256});
  }
  return w;
}

}  // namespace

void check_finite(const at::Tensor& x, const std::string& name, int64_t first) {
  const float* v = x.data_ptr<float>();
  for (int64_t i = 0; i < x.numel(); ++i)
    ST_CHECK(std::isfinite(v[i]), common::ErrorKind::kConfig,
             "weight {} holds {} at element {}: NF4 quantises finite weights only", name, v[i], first + i);
}

at::Tensor padding_records(int64_t count, const quant::Nf4Format& format, const at::TensorOptions& options) {
  at::Tensor host = at::empty({count * format.record_bytes()}, at::TensorOptions().dtype(at::kByte));
  auto* p = host.data_ptr<uint8_t>();
  for (int64_t r = 0; r < count; ++r) {
    std::memset(p + r * format.record_bytes(), quant::kZeroCodes, static_cast<size_t>(format.code_bytes()));
    std::memset(p + r * format.record_bytes() + format.code_bytes(), 0, static_cast<size_t>(format.scale_bytes()));
  }
  return host.to(options.device());
}

at::Tensor quantize_shard(const FlatLayout& layout, int shard, const std::vector<at::Tensor>& values,
                          const quant::Nf4Format& format) {
  const int64_t per = format.record_elements();
  ST_CHECK(layout.align() == per && values.size() == layout.params().size(), common::ErrorKind::kInternal,
           "NF4 flat: layout aligned to {}, records of {}; {} values for {} parameters", layout.align(), per,
           values.size(), layout.params().size());
  at::Tensor out = padding_records(layout.shard_numel() / per, format, at::TensorOptions());
  for (const ShardPiece& piece : layout.pieces_in_shard(shard)) {
    const ParamSpan& p = layout.params()[piece.param];
    const at::Tensor x = values[piece.param].detach().to(at::kCPU, at::kFloat).contiguous().reshape({-1});
    check_finite(x, p.name, 0);
    std::vector<float> absmax(static_cast<size_t>((p.numel + format.block_size - 1) / format.block_size));
    quant::ExactSum sum;
    quant::block_absmax(x.data_ptr<float>(), p.numel, format, absmax.data(), &sum);
    const float offset = quant::mean_absmax(sum, static_cast<int64_t>(absmax.size()));
    const int64_t records = (piece.length + per - 1) / per;
    quant::quantize_records(x.data_ptr<float>() + piece.param_offset, p.numel - piece.param_offset, records, offset,
                            format, out.data_ptr<uint8_t>() + piece.shard_offset / per * format.record_bytes());
  }
  return out;
}

void dequantize_into(const at::Tensor& records, const quant::Nf4Format& format, at::Tensor& out) {
  at::NoGradGuard no_grad;
  const int64_t per = format.record_elements(), bytes = format.record_bytes(), code_bytes = format.code_bytes();
  const int64_t count = records.numel() / bytes;
  ST_CHECK(records.numel() == count * bytes && out.numel() == count * per, common::ErrorKind::kInternal,
           "dequantising {} bytes of records of {} into {} elements", records.numel(), bytes, out.numel());
  Workspace& w = workspace(records.device());
  const int64_t chunk = std::min(count, std::max<int64_t>(1, (int64_t{1} << 22) / per));  // about 4 Mi weights
  if (!w.index.defined() || w.index.numel() < chunk * code_bytes) {
    w.index = at::empty({chunk * code_bytes}, records.options().dtype(at::kLong));
    w.values = at::empty({chunk * code_bytes, 2}, records.options().dtype(at::kFloat));
  }
  const at::Tensor all = records.view({count, bytes});
  for (int64_t first = 0; first < count; first += chunk) {
    const int64_t c = std::min(chunk, count - first);
    const at::Tensor r = all.narrow(0, first, c);
    // Each code byte's two values, the high nibble's first: (c, 256 blocks, block_size) in fp32.
    at::Tensor index = w.index.narrow(0, 0, c * code_bytes);
    index.view({c, code_bytes}).copy_(r.narrow(1, 0, code_bytes));
    at::Tensor values = w.values.narrow(0, 0, c * code_bytes);
    at::index_select_out(values, w.pairs, 0, index);
    at::Tensor absmax;
    if (format.double_quant) {
      const at::Tensor q = r.narrow(1, code_bytes, quant::kNestedBlock).to(at::kLong).reshape({-1});
      const at::Tensor tail = r.narrow(1, code_bytes + quant::kNestedBlock, 8).contiguous().view(at::kFloat);  // (c, 2)
      // Two operations, two roundings: map[q] * absmax2, then + offset.
      absmax = w.map.index_select(0, q).view({c, quant::kNestedBlock}).mul(tail.narrow(1, 0, 1)).add(tail.narrow(1, 1, 1));
    } else {
      absmax = r.narrow(1, code_bytes, quant::kNestedBlock * 4).contiguous().view(at::kFloat);
    }
    // The fp32 product, rounded once more to out's dtype on the way out.
    at::Tensor target = out.narrow(0, first * per, c * per).view({c, quant::kNestedBlock, format.block_size});
    at::mul_out(target, values.view({c, quant::kNestedBlock, format.block_size}), absmax.unsqueeze(-1));
  }
}

}  // namespace shardtune::fsdp
