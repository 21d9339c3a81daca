// Adafactor over flat shards: the per-tensor sums of a step summed over the shard group, then each
// piece updated with the same operations, in the same order, as transformers.Adafactor.step.
#include "runtime/fsdp/adafactor.h"

#include <ATen/TensorOperators.h>
#include <ATen/core/grad_mode.h>
#include <ATen/ops/all.h>
#include <ATen/ops/isfinite.h>
#include <ATen/ops/zeros.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <utility>

#include "common/error.h"

namespace shardtune::fsdp {
namespace {

// At most this many elements of a piece are computed at once (16 MiB of fp32 temporaries).
constexpr int64_t kBlockElements = int64_t{1} << 22;

// A rectangle of a tensor seen as rows x cols (a vector: one row), lying contiguously in the shard
// from element `shard`.
struct Block {
  int64_t row, col, rows, cols, shard;
};

// The blocks of a piece, in order: whole rows together where the piece holds them, a row's part
// alone where it does not, none of more than kBlockElements elements.
template <class Fn>
void for_each_block(int64_t param_offset, int64_t length, int64_t shard_offset, int64_t cols, Fn fn) {
  int64_t e = param_offset;
  const int64_t end = param_offset + length;
  while (e < end) {
    const int64_t row = e / cols, col = e % cols;
    Block b{row, col, 1, 0, shard_offset + (e - param_offset)};
    if (col == 0 && end - e >= cols && cols <= kBlockElements) {
      b.rows = std::min((end - e) / cols, kBlockElements / cols);
      b.cols = cols;
    } else {
      b.cols = std::min({cols - col, end - e, kBlockElements});
    }
    fn(b);
    e += b.rows * b.cols;
  }
}

at::Tensor block_of(const at::Tensor& flat, const Block& b) {
  return flat.narrow(0, b.shard, b.rows * b.cols).view({b.rows, b.cols});
}

}  // namespace

Adafactor::Adafactor(AdafactorConfig config, dist::Communicator* group) : config_(config), group_(group) {
  ST_CHECK(config.beta1 >= 0 && config.beta1 < 1 && config.clip_threshold > 0 && config.decay_rate < 0,
           common::ErrorKind::kConfig, "Adafactor: beta1 in [0, 1), clip_threshold > 0 and decay_rate < 0 are needed");
  ST_CHECK(!config.warmup_init || config.relative_step, common::ErrorKind::kConfig,
           "Adafactor: warmup_init needs relative_step");
}

std::string Adafactor::description() const {
  return fmt::format("Adafactor (factored second moments{}{})", config_.beta1 > 0 ? ", a first moment" : "",
                     config_.relative_step ? ", relative steps" : "");
}

FlatLayout statistics_layout(const FlatLayout& layout, AdafactorStatistic kind, int shards) {
  std::vector<FlatLayout::Entry> entries;
  for (const ParamSpan& p : layout.params()) {
    const bool matrix = p.shape.size() == 2;
    if (kind == kVectorMoments && !matrix) entries.push_back({p.name, {p.numel}});
    if (kind != kVectorMoments && matrix) entries.push_back({p.name, {p.shape[kind == kRowMeans ? 0 : 1]}});
  }
  return FlatLayout(entries, shards);
}

void Adafactor::add(at::Tensor param, at::Tensor grad, const FlatLayout& layout, int shard) {
  ST_CHECK(param.is_contiguous() && grad.is_contiguous() && param.dim() == 1 && grad.numel() == param.numel() &&
               param.numel() == layout.shard_numel() &&
               (param.scalar_type() == at::kFloat || param.scalar_type() == at::kBFloat16),
           common::ErrorKind::kInternal, "Adafactor needs contiguous fp32 or bf16 flat shards and their gradients");
  const int shards = group_ == nullptr ? 1 : group_->size();
  ST_CHECK(layout.shard_count() == shards, common::ErrorKind::kInternal,
           "Adafactor over a group of {} with a flat parameter of {} shards", shards, layout.shard_count());
  Flat f;
  f.param = param;
  f.grad = grad;
  if (config_.beta1 > 0) f.exp_avg = at::zeros({param.numel()}, param.options().dtype(at::kFloat));
  for (const AdafactorStatistic kind : {kRowMeans, kColumnMeans, kVectorMoments}) {
    f.shard_layout[kind] = std::make_unique<FlatLayout>(statistics_layout(layout, kind, shards));
    f.whole_layout[kind] = std::make_unique<FlatLayout>(statistics_layout(layout, kind, 1));
    f.stats[kind] = at::zeros({f.shard_layout[kind]->padded_numel()}, param.options().dtype(at::kFloat));
  }
  const std::vector<ShardPiece> pieces = layout.pieces_in_shard(shard);
  size_t matrices = 0, vectors = 0;
  for (size_t k = 0; k < layout.params().size(); ++k) {
    const ParamSpan& p = layout.params()[k];
    ST_CHECK(p.shape.size() <= 2, common::ErrorKind::kConfig, "Adafactor factors matrices, and {} has {} dimensions",
             p.name, p.shape.size());
    Tensor t;
    t.name = p.name;
    for (const ShardPiece& piece : pieces)
      if (piece.param == k) {
        t.shard_offset = piece.shard_offset;
        t.param_offset = piece.param_offset;
        t.length = piece.length;
      }
    t.factored = p.shape.size() == 2;
    t.numel = p.numel;
    t.rows = t.factored ? p.shape[0] : 1;
    t.cols = t.factored ? p.shape[1] : std::max<int64_t>(p.numel, 1);
    if (t.factored) {
      t.stat_offset[0] = f.whole_layout[kRowMeans]->params()[matrices].offset;
      t.stat_offset[1] = f.whole_layout[kColumnMeans]->params()[matrices++].offset;
    } else {
      t.stat_offset[0] = f.whole_layout[kVectorMoments]->params()[vectors++].offset;
    }
    t.sums = sums_numel_;
    sums_numel_ += 1 + (t.factored ? t.rows + t.cols : t.numel);
    t.norm = norms_numel_++;
    f.tensors.push_back(std::move(t));
  }
  flats_.push_back(std::move(f));
  steps_.push_back(step_);
}

Adafactor::Statistics Adafactor::statistics(size_t i, AdafactorStatistic kind, bool whole) {
  Flat& f = flats_.at(i);
  if (whole) return {f.stats[kind].narrow(0, 0, f.whole_layout[kind]->numel()), f.whole_layout[kind].get(), 0};
  const FlatLayout& layout = *f.shard_layout[kind];
  const int shard = group_ == nullptr ? 0 : group_->rank();
  return {f.stats[kind].narrow(0, layout.shard_begin(shard), layout.shard_numel()), &layout, shard};
}

void Adafactor::sum_over_group(at::Tensor& t) const {
  if (group_ != nullptr && group_->size() > 1) group_->all_reduce(t, dist::ReduceOp::kSum);
}

// The piece's squared norm, and its squared gradient (plus eps1) summed by row and by column (a
// matrix) or as it is (a vector), into the tensor's place in `sums`.
void Adafactor::accumulate(const Flat& f, at::Tensor& sums) const {
  for (const Tensor& t : f.tensors) {
    for_each_block(t.param_offset, t.length, t.shard_offset, t.cols, [&](const Block& b) {
      sums.narrow(0, t.sums, 1).add_(block_of(f.param, b).to(at::kFloat).square().sum());
      const at::Tensor g2 = block_of(f.grad, b).to(at::kFloat).square() + config_.eps1;
      if (t.factored) {
        sums.narrow(0, t.sums + 1 + b.row, b.rows).add_(g2.sum(1));
        sums.narrow(0, t.sums + 1 + t.rows + b.col, b.cols).add_(g2.sum(0));
      } else {
        sums.narrow(0, t.sums + 1 + b.col, b.cols).add_(g2.view({-1}));
      }
    });
  }
}

// Every tensor's statistics, from the group's sums (the same on every rank). transformers:
// exp_avg_sq_row.mul_(beta2t).add_(update.mean(dim=-1), alpha=1 - beta2t), and so on.
void Adafactor::update_statistics(Flat& f, const at::Tensor& sums, double beta2t) {
  for (const Tensor& t : f.tensors) {
    if (t.factored) {
      f.stats[kRowMeans].narrow(0, t.stat_offset[0], t.rows).mul_(beta2t).add_(
          sums.narrow(0, t.sums + 1, t.rows) / static_cast<double>(t.cols), 1.0 - beta2t);
      f.stats[kColumnMeans].narrow(0, t.stat_offset[1], t.cols).mul_(beta2t).add_(
          sums.narrow(0, t.sums + 1 + t.rows, t.cols) / static_cast<double>(t.rows), 1.0 - beta2t);
    } else {
      f.stats[kVectorMoments].narrow(0, t.stat_offset[0], t.numel).mul_(beta2t).add_(sums.narrow(0, t.sums + 1, t.numel),
                                                                              1.0 - beta2t);
    }
  }
}

at::Tensor Adafactor::raw_update(const Flat& f, const Tensor& t, int64_t row, int64_t col, int64_t rows, int64_t cols,
                                 const at::Tensor& grad) const {
  if (!t.factored) return f.stats[kVectorMoments].narrow(0, t.stat_offset[0] + col, cols).rsqrt().view({1, cols}) * grad;
  // transformers' _approx_sq_grad: (row / row.mean()).rsqrt() times col.rsqrt(), outer, then times the gradient.
  const at::Tensor all_rows = f.stats[kRowMeans].narrow(0, t.stat_offset[0], t.rows);
  const at::Tensor r = (all_rows.narrow(0, row, rows) / all_rows.mean()).rsqrt().unsqueeze(-1);
  const at::Tensor c = f.stats[kColumnMeans].narrow(0, t.stat_offset[1] + col, cols).rsqrt().unsqueeze(0);
  return (r * c) * grad;
}

void Adafactor::update_norms(const Flat& f, at::Tensor& norms) const {
  for (const Tensor& t : f.tensors)
    for_each_block(t.param_offset, t.length, t.shard_offset, t.cols, [&](const Block& b) {
      const at::Tensor u = raw_update(f, t, b.row, b.col, b.rows, b.cols, block_of(f.grad, b).to(at::kFloat));
      norms.narrow(0, t.norm, 1).add_(u.square().sum());
    });
}

namespace {

double relative_step(const AdafactorConfig& c, double step) {
  return std::min(c.warmup_init ? 1e-6 * step : 1e-2, 1.0 / std::sqrt(step));
}

}  // namespace

double Adafactor::step_size(double lr) const {
  return config_.relative_step ? relative_step(config_, static_cast<double>(step_ + 1)) : lr;
}

void Adafactor::apply(Flat& f, size_t i, double step_lr, const at::Tensor& host_sums, const at::Tensor& host_norms) {
  const auto step = static_cast<double>(steps_[i]);
  const float* sums = host_sums.data_ptr<float>();
  const float* norms = host_norms.data_ptr<float>();
  for (const Tensor& t : f.tensors) {
    if (t.length == 0) continue;
    const double size = std::sqrt(static_cast<double>(t.numel));
    double lr = step_lr;
    if (config_.relative_step) lr = relative_step(config_, step);
    if (config_.scale_parameter)
      lr *= std::max(config_.eps2, std::sqrt(static_cast<double>(sums[t.sums])) / size);
    const double clip = std::max(std::sqrt(static_cast<double>(norms[t.norm])) / size / config_.clip_threshold, 1.0);
    for_each_block(t.param_offset, t.length, t.shard_offset, t.cols, [&](const Block& b) {
      at::Tensor u = raw_update(f, t, b.row, b.col, b.rows, b.cols, block_of(f.grad, b).to(at::kFloat));
      u.div_(clip).mul_(lr);
      if (f.exp_avg.defined()) {
        at::Tensor m = block_of(f.exp_avg, b);
        m.mul_(config_.beta1).add_(u, 1.0 - config_.beta1);
        u = m;
      }
      at::Tensor p = block_of(f.param, b);
      at::Tensor p32 = p.to(at::kFloat);  // the parameter itself where it is fp32
      if (config_.weight_decay != 0) p32.add_(p32, -config_.weight_decay * lr);
      p32.sub_(u);
      if (!p32.is_same(p)) p.copy_(p32);
    });
  }
}

void Adafactor::step(double lr, const PieceObserver& updated, double grad_scale) {
  at::NoGradGuard no_grad;
  ++step_;
  if (flats_.empty()) return;
  if (grad_scale != 1.0)  // the statistics are sums over gradients: scaled first, as clipping would
    for (Flat& f : flats_) f.grad.mul_(grad_scale);
  const at::TensorOptions fp32 = flats_.front().param.options().dtype(at::kFloat);
  at::Tensor sums = at::zeros({sums_numel_}, fp32);
  for (const Flat& f : flats_) accumulate(f, sums);
  sum_over_group(sums);
  at::Tensor norms = at::zeros({norms_numel_}, fp32);
  for (size_t i = 0; i < flats_.size(); ++i) {
    ++steps_[i];
    update_statistics(flats_[i], sums, 1.0 - std::pow(static_cast<double>(steps_[i]), config_.decay_rate));
    update_norms(flats_[i], norms);
  }
  sum_over_group(norms);
  const at::Tensor host_sums = sums.cpu(), host_norms = norms.cpu();
  for (size_t i = 0; i < flats_.size(); ++i) {
    apply(flats_[i], i, lr, host_sums, host_norms);
    if (updated) updated(i, 0, flats_[i].param.numel());
  }
}

void Adafactor::reset_state() {
  step_ = 0;
  std::fill(steps_.begin(), steps_.end(), 0);
  for (Flat& f : flats_) {
    if (f.exp_avg.defined()) f.exp_avg.zero_();
    for (at::Tensor& s : f.stats) s.zero_();
  }
}

int64_t Adafactor::state_bytes() const {
  int64_t bytes = 0;
  for (const Flat& f : flats_) {
    if (f.exp_avg.defined()) bytes += static_cast<int64_t>(f.exp_avg.nbytes());
    for (const at::Tensor& s : f.stats) bytes += static_cast<int64_t>(s.nbytes());
  }
  return bytes;
}

bool Adafactor::all_finite() const {
  const auto finite = [](const at::Tensor& t) { return !t.defined() || at::isfinite(t).all().item<bool>(); };
  for (const Flat& f : flats_) {
    if (!finite(f.param) || !finite(f.exp_avg)) return false;
    for (const at::Tensor& s : f.stats)
      if (!finite(s)) return false;
  }
  return true;
}

}  // namespace shardtune::fsdp
