// Adafactor, as Hugging Face transformers' `Adafactor` computes it (Shazeer & Stern, 2018): a
// matrix keeps the running means of its squared gradient's rows and columns instead of a second
// moment per element, and its update is the gradient divided by their outer product's root; a
// vector keeps an element-wise second moment. Each tensor's update is clipped by its root mean
// square, and its step may be relative to the step count and scaled by the tensor's own RMS.
//
// Sharded: a rank holds pieces of a flat parameter's tensors (FSDP). A tensor's row and column
// sums, its squared norm and its update's squared norm are sums over the pieces of every rank of
// the shard group: each step sums them in two all-reduces (one vector for all the rank's flat
// parameters each time). The statistics (row and column means, a vector's second moment) are then
// the same on every rank of the group, and each rank keeps them whole: for a matrix of r x c they
// are r + c floats against the r c / N of its shard. The first moment (beta1 > 0) is element-wise,
// sharded like the parameter.
#pragma once

#include <ATen/core/Tensor.h>

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "runtime/dist/communicator.h"
#include "runtime/fsdp/optimizer.h"
#include "runtime/fsdp/shard_layout.h"

namespace shardtune::fsdp {

// transformers.Adafactor's arguments; `lr` is step()'s. Its defaults are transformers' but for
// relative_step and scale_parameter, off as in Hugging Face's Trainer (optim = "adafactor"), whose
// learning rate comes from the schedule.
struct AdafactorConfig {
  double eps1 = 1e-30;  // added to the squared gradient (transformers' eps[0])
  double eps2 = 1e-3;   // the least parameter scale (eps[1])
  double clip_threshold = 1.0;
  double decay_rate = -0.8;  // the second moment's decay at step t: 1 - t^decay_rate
  double beta1 = 0.0;        // 0: no first moment (transformers' beta1 = None, the same update)
  double weight_decay = 0.0;
  bool scale_parameter = false;  // the step times max(eps2, RMS of the tensor)
  bool relative_step = false;    // the step min(1e-2, 1/sqrt(t)) instead of lr
  bool warmup_init = false;      // relative_step: min(1e-6 t, 1/sqrt(t))
};

// Adafactor's statistics, by kind, as checkpoints name them: each matrix's row means, its column
// means, and each vector's element-wise second moment.
enum AdafactorStatistic { kRowMeans = 0, kColumnMeans = 1, kVectorMoments = 2 };
inline constexpr std::array<const char*, 3> kAdafactorStatistics = {"exp_avg_sq_row", "exp_avg_sq_col", "exp_avg_sq"};

// How the statistics of `kind` of a flat parameter laid out as `layout` lie over `shards` shards:
// its matrices' rows (r values each) or columns (c), or its vectors (numel), in flat order, each
// under its tensor's name.
FlatLayout statistics_layout(const FlatLayout& layout, AdafactorStatistic kind, int shards);

class Adafactor final : public Optimizer {
 public:
  // `group`: the ranks whose shards together hold the parameters (the shard group); null or of one
  // rank: every tensor lies whole in this rank's parameters.
  Adafactor(AdafactorConfig config, dist::Communicator* group);

  // `param` (fp32 or bf16, contiguous), shard `shard` of a flat parameter laid out as `layout`
  // over the group, is updated in place from `grad` (its shape) at each step. Every rank of the
  // group adds the same flat parameters in the same order. Tensors of more than two dimensions are
  // refused (common::Error kConfig).
  void add(at::Tensor param, at::Tensor grad, const FlatLayout& layout, int shard);

  // Collective over the group. `lr` is the step size unless relative_step. `updated` is told of
  // each parameter once it is wholly updated.
  void step(double lr, const PieceObserver& updated = nullptr, double grad_scale = 1.0) override;
  // With relative_step, the next step's relative step size (before scale_parameter's factor).
  double step_size(double lr) const override;

  void reset_state() override;
  int64_t state_bytes() const override;
  bool all_finite() const override;
  std::string name() const override { return "adafactor"; }
  std::string description() const override;
  const AdafactorConfig& config() const { return config_; }

  // The first moment of parameter i, shaped like it (fp32); undefined when beta1 = 0.
  at::Tensor& exp_avg(size_t i) { return flats_.at(i).exp_avg; }

  // Parameter i's statistics of one kind, the tensors' one after the other in flat order (a matrix
  // of r x c: r row means, c column means; a vector: its numel), as a layout of `shards` shards
  // lays them out: its `shard` shard is `tensor`. shards = the group's size and shard = this rank's
  // gives the rank's share of them, to save; shards = 1, shard 0 all of them, to load (a load sets
  // them on every rank of the group alike). None (numel 0) where the flat has no tensor of the kind.
  struct Statistics {
    at::Tensor tensor;
    const FlatLayout* layout = nullptr;
    int shard = 0;
  };
  Statistics statistics(size_t i, AdafactorStatistic kind, bool whole);

 private:
  // A tensor of a flat parameter, and its piece in this rank's shard (length 0: none).
  struct Tensor {
    std::string name;
    int64_t shard_offset = 0, param_offset = 0, length = 0;
    bool factored = false;
    int64_t rows = 1, cols = 0, numel = 0;
    int64_t stat_offset[2] = {0, 0};  // factored: rows' and columns' offsets in their statistics; else [0]: the vector's
    int64_t sums = 0;                 // where its sums start in the step's vector (squared norm; rows, columns or vector)
    int64_t norm = 0;                 // where its update's squared norm lies in the second vector
  };
  struct Flat {
    at::Tensor param, grad, exp_avg;
    std::vector<Tensor> tensors;
    std::array<at::Tensor, 3> stats;  // padded to the group's layout
    std::array<std::unique_ptr<FlatLayout>, 3> shard_layout, whole_layout;
  };
  void accumulate(const Flat& f, at::Tensor& sums) const;
  void update_statistics(Flat& f, const at::Tensor& sums, double beta2t);
  void update_norms(const Flat& f, at::Tensor& norms) const;
  // The update of flat i from the group's sums, on the host.
  void apply(Flat& f, size_t i, double lr, const at::Tensor& host_sums, const at::Tensor& host_norms);
  // The update (fp32, before clipping and scaling) of the rows x cols elements of tensor t from
  // (row, col), whose gradient is `grad` (fp32, rows x cols).
  at::Tensor raw_update(const Flat& f, const Tensor& t, int64_t row, int64_t col, int64_t rows, int64_t cols,
                        const at::Tensor& grad) const;
  void sum_over_group(at::Tensor& t) const;

  AdafactorConfig config_;
  dist::Communicator* group_;
  std::vector<Flat> flats_;
  int64_t sums_numel_ = 0, norms_numel_ = 0;
};

}  // namespace shardtune::fsdp
