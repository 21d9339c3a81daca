// AdamW, as torch.optim.AdamW.
#include "runtime/fsdp/adamw.h"

#include <ATen/TensorOperators.h>
#include <ATen/core/grad_mode.h>
#include <ATen/ops/all.h>
#include <ATen/ops/isfinite.h>
#include <ATen/ops/zeros_like.h>

#include <algorithm>
#include <cmath>

namespace shardtune::fsdp {

void AdamW::add(at::Tensor param, at::Tensor grad) {
  params_.push_back(param);
  grads_.push_back(grad);
  exp_avg_.push_back(at::zeros_like(param));
  exp_avg_sq_.push_back(at::zeros_like(param));
  steps_.push_back(step_);
}

void AdamW::set_step_count(int64_t step) {
  step_ = step;
  std::fill(steps_.begin(), steps_.end(), step);
}

void AdamW::step(double lr, const PieceObserver& updated) {
  at::NoGradGuard no_grad;
  ++step_;
  const double b1 = config_.beta1, b2 = config_.beta2;
  // Element by element, so a tensor can be updated a piece at a time: the temporaries (the
  // denominator, a gradient of another dtype) then stay at one piece each, where a whole
  // 1B-parameter shard on one GPU would add 10 GB at every step. Same results either way.
  for (size_t i = 0; i < params_.size(); ++i) {
    const auto step = static_cast<double>(++steps_[i]);
    const double bias_correction1 = 1 - std::pow(b1, step);
    const double bias_correction2_sqrt = std::sqrt(1 - std::pow(b2, step));
    const double step_size = lr / bias_correction1;
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
