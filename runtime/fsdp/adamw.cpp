// AdamW, as torch.optim.AdamW: fused where the state is fp32, an operation at a time otherwise.
#include "runtime/fsdp/adamw.h"

#include <ATen/Parallel.h>
#include <ATen/TensorOperators.h>
#include <ATen/core/grad_mode.h>
#include <ATen/ops/all.h>
#include <ATen/ops/isfinite.h>
#include <ATen/ops/zeros.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <utility>

#include "common/error.h"
#include "runtime/fsdp/adamw_kernel.h"

// LibTorch 2.x with CUDA has torch.optim.AdamW(fused=True)'s kernel.
#if defined(SHARDTUNE_TORCH_HAS_CUDA) && __has_include(<ATen/ops/_fused_adamw.h>)
#include <ATen/ops/_fused_adamw.h>
#include <ATen/ops/tensor.h>
#define ST_DEVICE_FUSED_ADAMW 1
#else
#define ST_DEVICE_FUSED_ADAMW 0
#endif

namespace shardtune::fsdp {

void AdamW::add(at::Tensor param, at::Tensor grad) {
  params_.push_back(param);
  grads_.push_back(grad);
  // Contiguous whatever the parameter's strides, as the fused pass needs.
  exp_avg_.push_back(at::zeros(param.sizes(), param.options()));
  exp_avg_sq_.push_back(at::zeros(param.sizes(), param.options()));
  steps_.push_back(step_);
}

void AdamW::set_step_count(int64_t step) {
  step_ = step;
  std::fill(steps_.begin(), steps_.end(), step);
}

AdamW::Path AdamW::path(size_t i) const {
  const at::Tensor &p = params_[i], &g = grads_[i];
  const bool fp32 = p.scalar_type() == at::kFloat && p.is_contiguous() && exp_avg_[i].is_contiguous() &&
                    exp_avg_sq_[i].is_contiguous() && g.is_contiguous() && g.device() == p.device();
  if (!config_.fused || !fp32) return Path::kOps;
  if (p.is_cpu() && (g.scalar_type() == at::kFloat || g.scalar_type() == at::kBFloat16)) return Path::kHostFused;
#if ST_DEVICE_FUSED_ADAMW
  if (p.is_cuda() && g.scalar_type() == at::kFloat) return Path::kDeviceFused;
#endif
  return Path::kOps;
}

bool AdamW::fused(size_t i) const { return path(i) != Path::kOps; }

void AdamW::step(double lr, const PieceObserver& updated) {
  at::NoGradGuard no_grad;
  ++step_;
  std::vector<size_t> on_device;
  for (size_t i = 0; i < params_.size(); ++i) {
    const auto step = static_cast<double>(++steps_[i]);
    const double bias_correction1 = 1 - std::pow(config_.beta1, step);
    const double bias_correction2_sqrt = std::sqrt(1 - std::pow(config_.beta2, step));
    switch (path(i)) {
      case Path::kHostFused: step_host_fused(i, lr, bias_correction1, bias_correction2_sqrt, updated); break;
      case Path::kDeviceFused: on_device.push_back(i); break;
      case Path::kOps: step_ops(i, lr, bias_correction1, bias_correction2_sqrt, updated); break;
    }
  }
  if (on_device.empty()) return;
  step_device_fused(on_device, lr);
  if (updated)
    for (size_t i : on_device)
      for (int64_t start = 0; start < params_[i].numel(); start += kObservedPieceElements)
        updated(i, start, std::min(kObservedPieceElements, params_[i].numel() - start));
}

void AdamW::step_ops(size_t i, double lr, double bias_correction1, double bias_correction2_sqrt,
                     const PieceObserver& updated) {
  const double b1 = config_.beta1, b2 = config_.beta2;
  const double step_size = lr / bias_correction1;
  // Element by element, so a tensor can be updated a piece at a time: the temporaries (the
  // denominator, a gradient of another dtype) then stay at one piece each, where a whole
  // 1B-parameter shard on one GPU would add 10 GB at every step. Same results either way.
  at::Tensor& p = params_[i];
  const bool flat = p.is_contiguous() && grads_[i].is_contiguous() && exp_avg_[i].is_contiguous() &&
                    exp_avg_sq_[i].is_contiguous();
  const int64_t n = p.numel();
  const int64_t piece = flat ? std::min(n, updated ? kObservedPieceElements : kPieceElements) : n;
  for (int64_t start = 0; start < n; start += piece) {
    const int64_t len = std::min(piece, n - start);
    const auto part = [&](const at::Tensor& t) { return flat ? t.view({-1}).narrow(0, start, len) : t; };
    at::Tensor pp = part(p), m = part(exp_avg_[i]), v = part(exp_avg_sq_[i]);
    const at::Tensor g = part(grads_[i]).to(p.scalar_type());
    pp.mul_(1 - lr * config_.weight_decay);
    m.mul_(b1).add_(g, 1 - b1);
    v.mul_(b2).addcmul_(g, g, 1 - b2);
    const at::Tensor denom = v.sqrt().div_(bias_correction2_sqrt).add_(config_.eps);
    pp.addcdiv_(m, denom, -step_size);
    if (updated) updated(i, start, len);
  }
}

void AdamW::step_host_fused(size_t i, double lr, double bias_correction1, double bias_correction2_sqrt,
                            const PieceObserver& updated) {
  const AdamWScalars s{static_cast<float>(1 - lr * config_.weight_decay),
                       static_cast<float>(config_.beta1),
                       static_cast<float>(1 - config_.beta1),
                       static_cast<float>(config_.beta2),
                       static_cast<float>(1 - config_.beta2),
                       static_cast<float>(bias_correction2_sqrt),
                       static_cast<float>(config_.eps),
                       static_cast<float>(-lr / bias_correction1)};
  float* p = params_[i].data_ptr<float>();
  float* m = exp_avg_[i].data_ptr<float>();
  float* v = exp_avg_sq_[i].data_ptr<float>();
  const at::Tensor& grad = grads_[i];
  const auto update = [&](int64_t begin, int64_t end) {
    if (grad.scalar_type() == at::kFloat) {
      adamw_update(p + begin, grad.data_ptr<float>() + begin, m + begin, v + begin, end - begin, s);
    } else {
      const auto* g = reinterpret_cast<const uint16_t*>(grad.data_ptr<at::BFloat16>());
      adamw_update(p + begin, g + begin, m + begin, v + begin, end - begin, s);
    }
  };
  // Written through their data, so their version counters move on as an in-place operation's
  // would: a copy gathered from the old shard, or a checksum taken of the old state, is then stale.
  for (at::Tensor* t : {&params_[i], &exp_avg_[i], &exp_avg_sq_[i]}) t->unsafeGetTensorImpl()->bump_version();
  const int64_t n = params_[i].numel();
  // With an observer, a piece at a time, so that it reads each piece from cache.
  const int64_t piece = updated ? kObservedPieceElements : std::max<int64_t>(n, 1);
  for (int64_t start = 0; start < n; start += piece) {
    const int64_t len = std::min(piece, n - start);
    at::parallel_for(start, start + len, kGrainElements, update);
    if (updated) updated(i, start, len);
  }
}

void AdamW::step_device_fused(const std::vector<size_t>& params, double lr) {
#if ST_DEVICE_FUSED_ADAMW
  // One call per device. The kernel reads each parameter's step (its own count: a parameter that
  // started training later counts from then) from a float32 scalar on the device, as
  // torch.optim.AdamW(fused=True) keeps state["step"]: here the elements of one tensor, copied
  // from the host once a step.
  std::map<int, std::vector<size_t>> by_device;
  for (size_t i : params) by_device[params_[i].device().index()].push_back(i);
  for (const auto& [index, members] : by_device) {
    std::vector<float> counts;
    for (size_t i : members) counts.push_back(static_cast<float>(steps_[i]));
    const at::Tensor steps = at::tensor(counts, at::TensorOptions().dtype(at::kFloat))
                                 .to(params_[members.front()].device(), /*non_blocking=*/false, /*copy=*/true);
    std::vector<at::Tensor> p, g, m, v, step;
    for (size_t k = 0; k < members.size(); ++k) {
      const size_t i = members[k];
      p.push_back(params_[i]);
      g.push_back(grads_[i]);
      m.push_back(exp_avg_[i]);
      v.push_back(exp_avg_sq_[i]);
      step.push_back(steps.select(0, static_cast<int64_t>(k)));
    }
    at::_fused_adamw_(p, g, m, v, {}, step, lr, config_.beta1, config_.beta2, config_.weight_decay, config_.eps,
                      /*amsgrad=*/false, /*maximize=*/false);
    // The shards' version counters are what says a gathered copy is stale (runtime/fsdp/
    // flat_param.cpp); on an H200 (PyTorch 2.11, 2026-11-28) a bf16 copy kept gathered across
    // steps (NO_SHARD) never saw this call's updates. Moved here, as the host pass does.
    for (const std::vector<at::Tensor>* list : {&p, &m, &v})
      for (const at::Tensor& t : *list) t.unsafeGetTensorImpl()->bump_version();
  }
#else
  (void)params;
  (void)lr;
  ST_CHECK(false, common::ErrorKind::kInternal, "AdamW: no fused kernel for the device in this build");
#endif
}

void AdamW::reset_state() {
  step_ = 0;
  std::fill(steps_.begin(), steps_.end(), 0);
  for (size_t i = 0; i < params_.size(); ++i) {
    exp_avg_[i].zero_();
    exp_avg_sq_[i].zero_();
  }
}

bool AdamW::all_finite() const {
  const auto finite = [](const at::Tensor& t) {
    const at::Tensor flat = t.reshape({-1});
    for (int64_t start = 0; start < flat.numel(); start += kPieceElements)
      if (!at::isfinite(flat.narrow(0, start, std::min(kPieceElements, flat.numel() - start))).all().item<bool>())
        return false;
    return true;
  };
  for (size_t i = 0; i < params_.size(); ++i)
    if (!finite(params_[i]) || !finite(exp_avg_[i]) || !finite(exp_avg_sq_[i])) return false;
  return true;
}

int64_t AdamW::state_bytes() const {
  int64_t bytes = 0;
  for (size_t i = 0; i < exp_avg_.size(); ++i) bytes += exp_avg_[i].nbytes() + exp_avg_sq_[i].nbytes();
  return bytes;
}

}  // namespace shardtune::fsdp
