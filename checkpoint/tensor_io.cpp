// Tensors to and from HDF5 flat ranges through bounded host staging.
#include "checkpoint/tensor_io.h"

#include <ATen/ops/empty.h>

#include <algorithm>

#include "checkpoint/h5_range.h"
#include "common/error.h"

namespace shardtune::checkpoint {
namespace {

bool direct(const at::Tensor& t) { return t.device().is_cpu() && t.scalar_type() == at::kFloat && t.is_contiguous(); }

// Pinned when the tensor is on a GPU, so the copies run at full speed.
at::Tensor staging(const at::Tensor& t, int64_t elements) {
  return at::empty({std::max<int64_t>(elements, 1)},
                   at::TensorOptions().dtype(at::kFloat).pinned_memory(!t.device().is_cpu()));
}

}  // namespace

std::vector<uint32_t> write_tensor(hid_t dataset, const at::Tensor& src, int64_t stage_elements) {
  ST_CHECK(src.dim() == 1 && stage_elements > 0, common::ErrorKind::kInternal,
           "write_tensor: a 1-D tensor and a positive stage size, got {} dims and {}", src.dim(), stage_elements);
  const int64_t n = src.numel();
  if (direct(src)) {
    write_flat_range(dataset, 0, n, src.data_ptr<float>());
    return block_crcs(src.data_ptr<float>(), n);
  }
  at::Tensor host = staging(src, std::min(stage_elements, n));
  BlockCrc crc;
  for (int64_t at = 0; at < n; at += stage_elements) {
    const int64_t count = std::min(stage_elements, n - at);
    at::Tensor piece = host.narrow(0, 0, count);
    piece.copy_(src.narrow(0, at, count));  // converts to fp32; waits for the device
    write_flat_range(dataset, at, count, piece.data_ptr<float>());
    crc.add(piece.data_ptr<float>(), count);
  }
  return crc.finish();
}

void read_tensor(const at::Tensor& dst, const FloatReader& read, int64_t stage_elements) {
  ST_CHECK(dst.dim() == 1 && stage_elements > 0, common::ErrorKind::kInternal,
           "read_tensor: a 1-D tensor and a positive stage size, got {} dims and {}", dst.dim(), stage_elements);
  const int64_t n = dst.numel();
  if (direct(dst)) {
    read(0, n, dst.data_ptr<float>());
    return;
  }
  at::Tensor host = staging(dst, std::min(stage_elements, n));
  for (int64_t at = 0; at < n; at += stage_elements) {
    const int64_t count = std::min(stage_elements, n - at);
    read(at, count, host.data_ptr<float>());
    dst.narrow(0, at, count).copy_(host.narrow(0, 0, count));  // blocking: the buffer is reused next
  }
}

}  // namespace shardtune::checkpoint
