// AdamW, as torch.optim.AdamW.
#include "runtime/fsdp/adamw.h"

#include <ATen/TensorOperators.h>
#include <ATen/core/grad_mode.h>
#include <ATen/ops/zeros_like.h>

#include <cmath>

namespace shardtune::fsdp {

void AdamW::add(at::Tensor param, at::Tensor grad) {
  params_.push_back(param);
  grads_.push_back(grad);
  exp_avg_.push_back(at::zeros_like(param));
  exp_avg_sq_.push_back(at::zeros_like(param));
}

void AdamW::step(double lr) {
  at::NoGradGuard no_grad;
  ++step_;
  const double b1 = config_.beta1, b2 = config_.beta2;
  const double bias_correction1 = 1 - std::pow(b1, static_cast<double>(step_));
  const double bias_correction2_sqrt = std::sqrt(1 - std::pow(b2, static_cast<double>(step_)));
  const double step_size = lr / bias_correction1;
  for (size_t i = 0; i < params_.size(); ++i) {
    at::Tensor& p = params_[i];
    const at::Tensor g = grads_[i].to(p.scalar_type());
    p.mul_(1 - lr * config_.weight_decay);
    exp_avg_[i].mul_(b1).add_(g, 1 - b1);
    exp_avg_sq_[i].mul_(b2).addcmul_(g, g, 1 - b2);
    const at::Tensor denom = (exp_avg_sq_[i].sqrt() / bias_correction2_sqrt).add_(config_.eps);
    p.addcdiv_(exp_avg_[i], denom, -step_size);
  }
}

int64_t AdamW::state_bytes() const {
  int64_t bytes = 0;
  for (size_t i = 0; i < exp_avg_.size(); ++i) bytes += exp_avg_[i].nbytes() + exp_avg_sq_[i].nbytes();
  return bytes;
}

}  // namespace shardtune::fsdp
