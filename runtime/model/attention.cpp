// Causal attention as every block runs it, and on a GPU the choice of its kernel per shape.
#include <ATen/TensorOperators.h>
#include <ATen/ops/matmul.h>
#include <ATen/ops/ones.h>
#include <ATen/ops/softmax.h>

#include <cmath>
#include <limits>

#include "runtime/model/llama.h"
#include "runtime/model/sdpa_version.h"
#if ST_SDPA_GQA
#include <ATen/Context.h>
#include <ATen/core/grad_mode.h>
#include <ATen/ops/ones_like.h>
#include <c10/core/InferenceMode.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>

#include "runtime/model/attention_choice.h"
#include "runtime/model/fused_ops.h"
#endif

namespace shardtune::model {
namespace {

#if ST_SDPA_GQA

at::Tensor sdpa(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
  return at::scaled_dot_product_attention(q, k, v, {}, 0.0, /*is_causal=*/true, std::nullopt,
                                          /*enable_gqa=*/k.size(1) != q.size(1));
}

// cuDNN's attention allowed or left out for one call (a process-wide flag of ATen's, which
// dist::bind_device leaves off for every other call), as it was after. Only the forward reads it:
// the backward runs the kernel the forward chose.
class CudnnAttention {
 public:
  explicit CudnnAttention(bool allow) : before_(at::globalContext().userEnabledCuDNNSDP()) {
    at::globalContext().setSDPUseCuDNN(allow);
  }
  ~CudnnAttention() { at::globalContext().setSDPUseCuDNN(before_); }
  CudnnAttention(const CudnnAttention&) = delete;
  CudnnAttention& operator=(const CudnnAttention&) = delete;

 private:
  bool before_;
};

// Seconds of one forward and backward of the call on copies of q, k and v (nothing of the step's
// graph is touched), cuDNN's attention allowed or not: one untimed run each (plans built,
// workspaces allocated), then the fastest of three each, taken in turn. The host waits for each.
AttentionChoice::Timing time_both(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
  at::AutoGradMode grad(true);
  auto leaf = [](const at::Tensor& x) { return x.detach().clone().requires_grad_(true); };
  const at::Tensor q2 = leaf(q), k2 = leaf(k), v2 = leaf(v);
  auto seconds = [&](bool cudnn) {
    const auto start = std::chrono::steady_clock::now();
    {
      CudnnAttention allow(cudnn);
      const at::Tensor out = sdpa(q2, k2, v2);
      out.backward(at::ones_like(out));
    }
    (void)q2.grad().sum().item<float>();  // waits for the queue
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  (void)q2.sum().item<float>();  // what was queued before is not counted
  seconds(false);
  seconds(true);
  AttentionChoice::Timing best{1e30, 1e30};
  for (int i = 0; i < 3; ++i) {
    best.without_cudnn = std::min(best.without_cudnn, seconds(false));
    best.with_cudnn = std::min(best.with_cudnn, seconds(true));
  }
  return best;
}

// Whether this call may take cuDNN's attention (Fusions::attention). Measured only for bf16 and
// fp16 on a GPU (cuDNN has no other), with gradients possible (not under inference mode) and
// without deterministic algorithms (cuDNN's backward is not: PyTorch leaves it out then anyway).
bool allow_cudnn(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
  switch (fusions().attention) {
    case AttentionKernels::kNoCudnn: return false;
    case AttentionKernels::kCudnn: return true;
    case AttentionKernels::kMeasured: break;
  }
  const bool half = q.scalar_type() == at::kBFloat16 || q.scalar_type() == at::kHalf;
  if (!half || c10::InferenceMode::is_enabled() || at::globalContext().deterministicAlgorithms()) return false;
  const std::string shape = fmt::format("q ({}) k ({}) v ({}) {} {}", fmt::join(q.sizes(), ", "),
                                        fmt::join(k.sizes(), ", "), fmt::join(v.sizes(), ", "),
                                        c10::toString(q.scalar_type()), q.device().str());
  return attention_choice().use_cudnn(shape, [&] { return time_both(q, k, v); });
}

#else

// transformers computes the softmax in fp32; fp64 (used by gradient checks) stays fp64.
[[maybe_unused]] at::ScalarType at_least_fp32(at::ScalarType t) { return t == at::kDouble ? at::kDouble : at::kFloat; }

[[maybe_unused]] at::Tensor causal_allowed(int64_t t, const at::Device& device) {
  return at::ones({t, t}, at::TensorOptions().dtype(at::kBool).device(device)).tril().view({1, 1, t, t});
}

#endif

}  // namespace

at::Tensor causal_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
#if ST_SDPA_GQA
  if (!q.is_cuda()) return sdpa(q, k, v);
  CudnnAttention allow(allow_cudnn(q, k, v));
  return sdpa(q, k, v);
#elif TORCH_VERSION_MAJOR >= 2
  return at::scaled_dot_product_attention(q, k, v, {}, 0.0, /*is_causal=*/true);
#else
  const double scale = 1.0 / std::sqrt(static_cast<double>(q.size(-1)));
  at::Tensor scores = at::matmul(q, k.transpose(-2, -1)) * scale;
  // transformers adds the dtype's lowest value where attention is not allowed, then takes an fp32
  // softmax: the same as masking after the upcast.
  scores = scores.to(at_least_fp32(scores.scalar_type()));
  scores = scores.masked_fill(causal_allowed(q.size(-2), q.device()).logical_not(), std::numeric_limits<float>::lowest());
  at::Tensor probs = at::softmax(scores, -1).to(q.scalar_type());
  return at::matmul(probs, v);
#endif
}

}  // namespace shardtune::model
