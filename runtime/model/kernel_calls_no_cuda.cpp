// A build without CUDA kernels (no CUDA LibTorch or no nvcc): the CUDA calls say so.
#include "common/error.h"
#include "runtime/model/kernel_calls_cuda.h"

namespace shardtune::model::kernel_calls::cuda {
namespace {

[[noreturn]] void none() {
  common::raise(common::ErrorKind::kInternal,
                "this build has no CUDA kernels (it needs a CUDA LibTorch and nvcc at configure time)");
}

}  // namespace

bool built() { return false; }
RmsNormForward rmsnorm_forward(const at::Tensor&, const at::Tensor&, double, const at::Tensor&) { none(); }
RmsNormBackward rmsnorm_backward(const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                 const at::Tensor&) {
  none();
}
void rope_into(const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&, bool) { none(); }
at::Tensor swiglu_forward(const at::Tensor&, const at::Tensor&) { none(); }
SwigluBackward swiglu_backward(const at::Tensor&, const at::Tensor&, const at::Tensor&) { none(); }
at::Tensor swiglu_joined_forward(const at::Tensor&) { none(); }
at::Tensor swiglu_joined_backward(const at::Tensor&, const at::Tensor&) { none(); }
at::Tensor cross_entropy_in_place(at::Tensor&, const at::Tensor&, int64_t) { none(); }

}  // namespace shardtune::model::kernel_calls::cuda
