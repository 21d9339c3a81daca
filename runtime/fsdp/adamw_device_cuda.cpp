#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include "runtime/fsdp/adamw_device.h"
#include "runtime/kernels/adamw_cuda.h"

namespace shardtune::fsdp::adamw_device {

bool built() { return true; }

void update(const at::Tensor& p, const at::Tensor& g, const at::Tensor& m, const at::Tensor& v,
            const kernels::AdamWScalars& s) {
  const c10::cuda::CUDAGuard guard(p.device());
  kernels::adamw_cuda(p.data_ptr<float>(), g.data_ptr<float>(), m.data_ptr<float>(), v.data_ptr<float>(), p.numel(), s,
                      static_cast<void*>(c10::cuda::getCurrentCUDAStream(p.device().index()).stream()));
}

}  // namespace shardtune::fsdp::adamw_device
