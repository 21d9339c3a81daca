// A build without CUDA kernels: AdamW's device kernel says so.
#include "common/error.h"
#include "runtime/fsdp/adamw_device.h"

namespace shardtune::fsdp::adamw_device {

bool built() { return false; }

void update(const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&, const kernels::AdamWScalars&) {
  common::raise(common::ErrorKind::kInternal, "this build has no CUDA kernels (AdamW's device kernel)");
}

}  // namespace shardtune::fsdp::adamw_device
