// AdamW, as torch.optim.AdamW: fused where the state is fp32, an operation at a time otherwise.
#include "runtime/fsdp/adamw.h"

#include <ATen/Parallel.h>
#include <ATen/TensorOperators.h>
#include <ATen/core/grad_mode.h>
#include <ATen/ops/all.h>
#include <ATen/ops/full.h>
#include <ATen/ops/isfinite.h>
#include <ATen/ops/zeros.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <utility>

#include "common/error.h"
#include "runtime/quant/dynamic_map.h"
#include "runtime/fsdp/adam8bit_ops.h"
#include "runtime/fsdp/adamw_device.h"
#include "runtime/kernels/adamw_reference.h"

// LibTorch 2.x with CUDA has torch.optim.AdamW(fused=True)'s kernel.
#if defined(SHARDTUNE_TORCH_HAS_CUDA) && __has_include(<ATen/ops/_fused_adamw.h>)
#include <ATen/ops/_fused_adamw.h>
#include <ATen/ops/tensor.h>
#define ST_DEVICE_FUSED_ADAMW 1
#else
#define ST_DEVICE_FUSED_ADAMW 0
#endif

namespace shardtune::fsdp {

using kernels::AdamWScalars;
using kernels::adamw_update;

namespace {

AdamWScalars scalars_of(const AdamWConfig& c, double lr, double bias_correction1, double bias_correction2_sqrt,
                        double grad_scale) {
  return {static_cast<float>(1 - lr * c.weight_decay), static_cast<float>(c.beta1), static_cast<float>(1 - c.beta1),
          static_cast<float>(c.beta2),                 static_cast<float>(1 - c.beta2),
          static_cast<float>(bias_correction2_sqrt),    static_cast<float>(c.eps),
          static_cast<float>(-lr / bias_correction1),   static_cast<float>(grad_scale)};
}

}  // namespace

void AdamW::add(at::Tensor param, at::Tensor grad, std::vector<StatePiece> pieces) {
  params_.push_back(param);
  grads_.push_back(grad);
  steps_.push_back(step_);
  if (!config_.blockwise_8bit) {
    ST_CHECK(pieces.empty(), common::ErrorKind::kInternal, "AdamW: state pieces without blockwise_8bit");
    // Contiguous whatever the parameter's strides, as the fused pass needs.
    exp_avg_.push_back(at::zeros(param.sizes(), param.options()));
    exp_avg_sq_.push_back(at::zeros(param.sizes(), param.options()));
    return;
  }
  ST_CHECK(param.is_contiguous() && grad.is_contiguous() && grad.numel() == param.numel() &&
               (param.scalar_type() == at::kFloat || param.scalar_type() == at::kBFloat16),
           common::ErrorKind::kInternal, "8-bit AdamW needs contiguous fp32 or bf16 parameters and their gradients");
  if (pieces.empty() && param.numel() > 0) pieces.push_back({0, param.numel()});
  for (const StatePiece& piece : pieces)
    ST_CHECK(piece.offset % kAdam8bitBlock == 0 && piece.length >= 0 && piece.offset + piece.length <= param.numel(),
             common::ErrorKind::kInternal, "8-bit AdamW: piece [{}, +{}) of a parameter of {} is not block-aligned",
             piece.offset, piece.length, param.numel());
  const int64_t blocks = (param.numel() + kAdam8bitBlock - 1) / kAdam8bitBlock;
  const at::TensorOptions on = param.options();
  // Codes 0 and scales 0, as bitsandbytes starts them: every moment decodes to zero. No codes where
  // no piece is quantized (the embedding's flat parameter).
  const bool any_quantized = std::any_of(pieces.begin(), pieces.end(), [](const StatePiece& p) { return p.quantized; });
  const int64_t codes = any_quantized ? blocks * kAdam8bitBlock : 0;
  codes1_.push_back(at::zeros({codes}, on.dtype(at::kByte)));
  codes2_.push_back(at::zeros({codes}, on.dtype(at::kByte)));
  absmax1_.push_back(at::zeros({blocks}, on.dtype(at::kFloat)));
  absmax2_.push_back(at::zeros({blocks}, on.dtype(at::kFloat)));
  std::vector<at::Tensor> m, v;
  for (const StatePiece& piece : pieces) {
    m.push_back(piece.quantized ? at::Tensor() : at::zeros({piece.length}, on.dtype(at::kFloat)));
    v.push_back(piece.quantized ? at::Tensor() : at::zeros({piece.length}, on.dtype(at::kFloat)));
  }
  piece_m_.push_back(std::move(m));
  piece_v_.push_back(std::move(v));
  pieces_.push_back(std::move(pieces));
}

at::Tensor& AdamW::exp_avg(size_t i) {
  ST_CHECK(!config_.blockwise_8bit, common::ErrorKind::kInternal, "8-bit AdamW keeps no fp32 moments");
  return exp_avg_.at(i);
}

at::Tensor& AdamW::exp_avg_sq(size_t i) {
  ST_CHECK(!config_.blockwise_8bit, common::ErrorKind::kInternal, "8-bit AdamW keeps no fp32 moments");
  return exp_avg_sq_.at(i);
}

at::Tensor& AdamW::codes(size_t i, int moment) {
  ST_CHECK(config_.blockwise_8bit, common::ErrorKind::kInternal, "AdamW keeps no 8-bit codes");
  return moment == 0 ? codes1_.at(i) : codes2_.at(i);
}

at::Tensor& AdamW::absmax(size_t i, int moment) {
  ST_CHECK(config_.blockwise_8bit, common::ErrorKind::kInternal, "AdamW keeps no 8-bit scales");
  return moment == 0 ? absmax1_.at(i) : absmax2_.at(i);
}

at::Tensor AdamW::decoded(size_t i, int moment) const {
  ST_CHECK(config_.blockwise_8bit, common::ErrorKind::kInternal, "AdamW keeps no 8-bit codes");
  const std::array<float, 256>& map = quant::dynamic_map(moment == 0);
  const at::Tensor codes = (moment == 0 ? codes1_ : codes2_).at(i).to(at::kCPU);
  const at::Tensor scales = (moment == 0 ? absmax1_ : absmax2_).at(i).to(at::kCPU);
  at::Tensor out = at::zeros({params_.at(i).numel()}, at::TensorOptions().dtype(at::kFloat));
  const uint8_t* c = codes.data_ptr<uint8_t>();
  const float* a = scales.data_ptr<float>();
  float* o = out.data_ptr<float>();
  for (size_t k = 0; k < pieces_[i].size(); ++k) {
    const StatePiece& piece = pieces_[i][k];
    if (!piece.quantized) {
      out.narrow(0, piece.offset, piece.length).copy_((moment == 0 ? piece_m_ : piece_v_)[i][k]);
      continue;
    }
    for (int64_t e = piece.offset; e < piece.offset + piece.length; ++e) o[e] = map[c[e]] * a[e / kAdam8bitBlock];
  }
  return out.view(params_[i].sizes());
}

std::optional<int64_t> AdamW::encode_moments(size_t i, const at::Tensor& exp_avg, const at::Tensor& exp_avg_sq) {
  ST_CHECK(config_.blockwise_8bit, common::ErrorKind::kInternal, "AdamW keeps no 8-bit codes");
  std::array<at::Tensor, 2> codes;
  const std::array<const at::Tensor*, 2> values{&exp_avg, &exp_avg_sq};
  for (int moment = 0; moment < 2; ++moment) {
    const std::array<float, 256>& map = quant::dynamic_map(moment == 0);
    const at::Tensor scales = absmax(i, moment).to(at::kCPU).contiguous();
    const at::Tensor decoded = values[moment]->to(at::kCPU).to(at::kFloat).contiguous();
    codes[moment] = at::zeros({codes1_.at(i).numel()}, at::TensorOptions().dtype(at::kByte));
    const float* a = scales.data_ptr<float>();
    const float* v = decoded.data_ptr<float>();
    uint8_t* c = codes[moment].data_ptr<uint8_t>();
    for (const StatePiece& piece : pieces_[i]) {
      if (!piece.quantized) continue;  // fp32: taken as they are, below
      for (int64_t e = piece.offset; e < piece.offset + piece.length; ++e) {
        const float scale = a[e / kAdam8bitBlock];
        // The code the step would store for this value, sign rule included...
        uint8_t q = encode(map, v[e] / scale, moment == 0);
        if (moment == 0 && std::signbit(map[q]) != std::signbit(v[e]))
          q = static_cast<uint8_t>(v[e] > 0.0f ? q + 1 : q - 1);
        // ...which decodes to it unless the scale is so small that codes round together: then
        // any code that decodes to it bit for bit is the same state.
        const auto same = [&](int k) {
          const float d = map[static_cast<size_t>(k)] * scale;
          return std::memcmp(&d, &v[e], sizeof d) == 0;
        };
        if (!same(q)) {
          int k = 0;
          while (k < 256 && !same(k)) ++k;
          if (k == 256) return e;
          q = static_cast<uint8_t>(k);
        }
        c[e] = q;
      }
    }
  }
  codes1_[i].copy_(codes[0]);
  codes2_[i].copy_(codes[1]);
  for (size_t k = 0; k < pieces_[i].size(); ++k) {
    const StatePiece& piece = pieces_[i][k];
    if (piece.quantized) continue;
    piece_m_[i][k].copy_(exp_avg.reshape({-1}).narrow(0, piece.offset, piece.length));
    piece_v_[i][k].copy_(exp_avg_sq.reshape({-1}).narrow(0, piece.offset, piece.length));
  }
  return std::nullopt;
}

AdamW::Path AdamW::path(size_t i) const {
  const at::Tensor &p = params_[i], &g = grads_[i];
  const bool fp32 = p.scalar_type() == at::kFloat && p.is_contiguous() && exp_avg_[i].is_contiguous() &&
                    exp_avg_sq_[i].is_contiguous() && g.is_contiguous() && g.device() == p.device();
  if (!config_.fused || !fp32) return Path::kOps;
  if (p.is_cpu() && (g.scalar_type() == at::kFloat || g.scalar_type() == at::kBFloat16)) return Path::kHostFused;
  if (p.is_cuda() && g.scalar_type() == at::kFloat && config_.device_kernel && adamw_device::built())
    return Path::kDeviceKernel;
#if ST_DEVICE_FUSED_ADAMW
  if (p.is_cuda() && g.scalar_type() == at::kFloat) return Path::kDeviceFused;
#endif
  return Path::kOps;
}

bool AdamW::fused(size_t i) const {
  return config_.blockwise_8bit ? params_.at(i).is_cpu() && params_[i].scalar_type() == at::kFloat
                                : path(i) != Path::kOps;
}

void AdamW::step(double lr, const PieceObserver& updated, double grad_scale) {
  at::NoGradGuard no_grad;
  ++step_;
  std::vector<size_t> on_device;
  for (size_t i = 0; i < params_.size(); ++i) {
    // The fused passes take the scale in their own multiply; the others scale the gradient first,
    // as a separate clipping pass would.
    const bool fused_scale = !config_.blockwise_8bit && path(i) != Path::kOps;
    if (grad_scale != 1.0 && !fused_scale) grads_[i].mul_(grad_scale);
    if (config_.blockwise_8bit) {
      ++steps_[i];
      step_8bit(i, lr);
      if (updated) updated(i, 0, params_[i].numel());
      continue;
    }
    const auto step = static_cast<double>(++steps_[i]);
    const double bias_correction1 = 1 - std::pow(config_.beta1, step);
    const double bias_correction2_sqrt = std::sqrt(1 - std::pow(config_.beta2, step));
    switch (path(i)) {
      case Path::kHostFused:
        step_host_fused(i, lr, bias_correction1, bias_correction2_sqrt, grad_scale, updated);
        break;
      case Path::kDeviceKernel:
        adamw_device::update(params_[i], grads_[i], exp_avg_[i], exp_avg_sq_[i],
                             scalars_of(config_, lr, bias_correction1, bias_correction2_sqrt, grad_scale));
        // Written through their data: their version counters move on as an in-place operation's would.
        for (at::Tensor* t : {&params_[i], &exp_avg_[i], &exp_avg_sq_[i]}) t->unsafeGetTensorImpl()->bump_version();
        if (updated)
          for (int64_t start = 0; start < params_[i].numel(); start += kObservedPieceElements)
            updated(i, start, std::min(kObservedPieceElements, params_[i].numel() - start));
        break;
      case Path::kDeviceFused: on_device.push_back(i); break;
      case Path::kOps: step_ops(i, lr, bias_correction1, bias_correction2_sqrt, updated); break;
    }
  }
  if (on_device.empty()) return;
  step_device_fused(on_device, lr, grad_scale);
  if (updated)
    for (size_t i : on_device)
      for (int64_t start = 0; start < params_[i].numel(); start += kObservedPieceElements)
        updated(i, start, std::min(kObservedPieceElements, params_[i].numel() - start));
}

void AdamW::step_8bit(size_t i, double lr) {
  const Adam8bitScalars s =
      adam8bit_scalars(lr, config_.beta1, config_.beta2, config_.eps, config_.weight_decay, steps_[i]);
  at::Tensor &p = params_[i], &g = grads_[i];
  const bool host = p.is_cpu() && p.scalar_type() == at::kFloat && g.device() == p.device() &&
                    (g.scalar_type() == at::kFloat || g.scalar_type() == at::kBFloat16);
  if (!host && maps_.empty()) {
    const Adam8bitMaps maps = adam8bit_maps(p.device());
    maps_ = {maps.signed_map, maps.unsigned_map};
  }
  const std::vector<StatePiece>& pieces = pieces_[i];
  for (size_t k = 0; k < pieces.size(); ++k) {
    const StatePiece& piece = pieces[k];
    if (piece.length == 0) continue;
    if (!piece.quantized) {  // a small tensor: fp32 moments
      at::Tensor &m = piece_m_[i][k], &v = piece_v_[i][k];
      if (!host) {
        adam32bit_update_ops(p.view({-1}).narrow(0, piece.offset, piece.length),
                             g.view({-1}).narrow(0, piece.offset, piece.length), m, v, s);
      } else if (g.scalar_type() == at::kFloat) {
        adam32bit_update(p.data_ptr<float>() + piece.offset, g.data_ptr<float>() + piece.offset, m.data_ptr<float>(),
                         v.data_ptr<float>(), piece.length, s);
      } else {
        adam32bit_update(p.data_ptr<float>() + piece.offset,
                         reinterpret_cast<const uint16_t*>(g.data_ptr<at::BFloat16>()) + piece.offset,
                         m.data_ptr<float>(), v.data_ptr<float>(), piece.length, s);
      }
      continue;
    }
    const int64_t b0 = piece.offset / kAdam8bitBlock, nb = (piece.length + kAdam8bitBlock - 1) / kAdam8bitBlock;
    if (!host) {
      const auto part = [&](const at::Tensor& t) { return t.narrow(0, piece.offset, piece.length); };
      adam8bit_update_ops(part(p.view({-1})), part(g.view({-1})),
                          codes1_[i].narrow(0, piece.offset, nb * kAdam8bitBlock),
                          codes2_[i].narrow(0, piece.offset, nb * kAdam8bitBlock), absmax1_[i].narrow(0, b0, nb),
                          absmax2_[i].narrow(0, b0, nb), s, {maps_[0], maps_[1]});
      continue;
    }
    // Blocks are independent: split among LibTorch's intra-op threads.
    at::parallel_for(0, nb, kGrainElements / kAdam8bitBlock, [&](int64_t first, int64_t end) {
      const int64_t begin = piece.offset + first * kAdam8bitBlock;
      const int64_t n = std::min(end * kAdam8bitBlock, piece.length) - first * kAdam8bitBlock;
      uint8_t* c1 = codes1_[i].data_ptr<uint8_t>() + begin;
      uint8_t* c2 = codes2_[i].data_ptr<uint8_t>() + begin;
      float* a1 = absmax1_[i].data_ptr<float>() + b0 + first;
      float* a2 = absmax2_[i].data_ptr<float>() + b0 + first;
      float* pp = p.data_ptr<float>() + begin;
      if (g.scalar_type() == at::kFloat)
        adam8bit_update(pp, g.data_ptr<float>() + begin, c1, c2, a1, a2, n, s);
      else
        adam8bit_update(pp, reinterpret_cast<const uint16_t*>(g.data_ptr<at::BFloat16>()) + begin, c1, c2, a1, a2, n, s);
    });
  }
  if (host) {  // written through their data: their version counters move on as an in-place operation's would
    for (at::Tensor* t : {&p, &codes1_[i], &codes2_[i], &absmax1_[i], &absmax2_[i]})
      t->unsafeGetTensorImpl()->bump_version();
    for (std::vector<at::Tensor>* list : {&piece_m_[i], &piece_v_[i]})
      for (at::Tensor& t : *list)
        if (t.defined()) t.unsafeGetTensorImpl()->bump_version();
  }
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
                            double grad_scale, const PieceObserver& updated) {
  const AdamWScalars s = scalars_of(config_, lr, bias_correction1, bias_correction2_sqrt, grad_scale);
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

void AdamW::step_device_fused(const std::vector<size_t>& params, double lr, double grad_scale) {
#if ST_DEVICE_FUSED_ADAMW
  // One call per device. The kernel reads each parameter's step (its own count: a parameter that
  // started training later counts from then) from a float32 scalar on the device, as
  // torch.optim.AdamW(fused=True) keeps state["step"]: here the elements of one tensor, kept on
  // the device and advanced there. The host copies the counts up (and waits for the device) only
  // where they are not the last step's plus one: at the first step, or once a resume or a reset
  // has set them.
  std::map<int, std::vector<size_t>> by_device;
  for (size_t i : params) by_device[params_[i].device().index()].push_back(i);
  for (const auto& [index, members] : by_device) {
    std::vector<int64_t> counts;
    for (size_t i : members) counts.push_back(steps_[i]);
    DeviceSteps& kept = device_steps_[index];
    bool next = kept.values.defined() && kept.members == members;
    for (size_t k = 0; next && k < members.size(); ++k) next = counts[k] == kept.counts[k] + 1;
    if (next) {
      kept.values.add_(1);
    } else {
      const std::vector<float> values(counts.begin(), counts.end());
      kept.values = at::tensor(values, at::TensorOptions().dtype(at::kFloat))
                        .to(params_[members.front()].device(), /*non_blocking=*/false, /*copy=*/true);
    }
    kept.members = members;
    kept.counts = counts;
    const at::Tensor& steps = kept.values;
    std::vector<at::Tensor> p, g, m, v, step;
    for (size_t k = 0; k < members.size(); ++k) {
      const size_t i = members[k];
      p.push_back(params_[i]);
      g.push_back(grads_[i]);
      m.push_back(exp_avg_[i]);
      v.push_back(exp_avg_sq_[i]);
      step.push_back(steps.select(0, static_cast<int64_t>(k)));
    }
    // The kernel divides each gradient by its grad_scale (a loss scale, for torch.amp): clipping's
    // coefficient is its reciprocal. A scale of 1 passes none.
    std::optional<at::Tensor> divisor;
    if (grad_scale != 1.0)
      divisor = at::full({}, 1.0 / grad_scale, steps.options());
    at::_fused_adamw_(p, g, m, v, {}, step, lr, config_.beta1, config_.beta2, config_.weight_decay, config_.eps,
                      /*amsgrad=*/false, /*maximize=*/false, divisor);
    // The shards' version counters are what says a gathered copy is stale (runtime/fsdp/
    // flat_param.cpp); on an H200 (PyTorch 2.11, 2026-11-28) a bf16 copy kept gathered across
    // steps (NO_SHARD) never saw this call's updates. Moved here, as the host pass does.
    for (const std::vector<at::Tensor>* list : {&p, &m, &v})
      for (const at::Tensor& t : *list) t.unsafeGetTensorImpl()->bump_version();
  }
#else
  (void)params;
  (void)lr;
  (void)grad_scale;
  ST_CHECK(false, common::ErrorKind::kInternal, "AdamW: no fused kernel for the device in this build");
#endif
}

void AdamW::reset_state() {
  step_ = 0;
  std::fill(steps_.begin(), steps_.end(), 0);
  for (at::Tensor& t : exp_avg_) t.zero_();
  for (at::Tensor& t : exp_avg_sq_) t.zero_();
  for (std::vector<at::Tensor>* list : {&codes1_, &codes2_, &absmax1_, &absmax2_})
    for (at::Tensor& t : *list) t.zero_();
  for (std::vector<std::vector<at::Tensor>>* lists : {&piece_m_, &piece_v_})
    for (std::vector<at::Tensor>& list : *lists)
      for (at::Tensor& t : list)
        if (t.defined()) t.zero_();
}

bool AdamW::all_finite() const {
  const auto finite = [](const at::Tensor& t) {
    const at::Tensor flat = t.reshape({-1});
    for (int64_t start = 0; start < flat.numel(); start += kPieceElements)
      if (!at::isfinite(flat.narrow(0, start, std::min(kPieceElements, flat.numel() - start))).all().item<bool>())
        return false;
    return true;
  };
  for (const std::vector<at::Tensor>* list : {&params_, &exp_avg_, &exp_avg_sq_, &absmax1_, &absmax2_})
    for (const at::Tensor& t : *list)
      if (!finite(t)) return false;
  for (const std::vector<std::vector<at::Tensor>>* lists : {&piece_m_, &piece_v_})
    for (const std::vector<at::Tensor>& list : *lists)
      for (const at::Tensor& t : list)
        if (t.defined() && !finite(t)) return false;
  return true;
}

int64_t AdamW::state_bytes() const {
  int64_t bytes = 0;
  for (const std::vector<at::Tensor>* list : {&exp_avg_, &exp_avg_sq_, &codes1_, &codes2_, &absmax1_, &absmax2_})
    for (const at::Tensor& t : *list) bytes += static_cast<int64_t>(t.nbytes());
  for (const std::vector<std::vector<at::Tensor>>* lists : {&piece_m_, &piece_v_})
    for (const std::vector<at::Tensor>& list : *lists)
      for (const at::Tensor& t : list)
        if (t.defined()) bytes += static_cast<int64_t>(t.nbytes());
  return bytes;
}

}  // namespace shardtune::fsdp
