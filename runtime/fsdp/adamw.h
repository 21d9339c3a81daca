// AdamW with decoupled weight decay, element by element as torch.optim.AdamW computes it. Each
// parameter is any tensor with its gradient tensor: an FSDP shard or, in a plain reference
// training, a whole parameter; either way the state is shaped like it.
//
// fp32 state is updated in one fused pass: on the host by runtime/kernels/adamw_reference.h's
// loop, on a GPU by its CUDA kernel (adamw_cuda.h: the same bits) where the build has the kernels,
// else by LibTorch's fused AdamW kernel (torch.optim.AdamW(fused=True)). Other dtypes, and `fused
// = false`, take an operation at a time, LibTorch's single-tensor path exactly.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "runtime/fsdp/optimizer.h"

namespace shardtune::fsdp {

struct AdamWConfig {
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;
  bool fused = true;
  bool blockwise_8bit = false;
  bool device_kernel = true;  // fused on a GPU: shardtune's kernel where built, else LibTorch's
};

// Where the tensors lie in a parameter of a blockwise 8-bit AdamW (a flat shard): the pieces
// [offset, offset + length), each starting at a multiple of the block. A piece that ends at its
// tensor's end may end inside a block; elements outside every piece (alignment gaps, padding) are
// neither updated nor given state that changes. A piece of a tensor of fewer than kMin8bitSize
// elements is not `quantized`: its moments stay fp32 (runtime/fsdp/adam8bit.h).
struct StatePiece {
  int64_t offset = 0;
  int64_t length = 0;
  bool quantized = true;
};

class AdamW final : public Optimizer {
 public:
  explicit AdamW(AdamWConfig config) : config_(config) {}

  // `param` is updated in place from `grad` at each step; the moments take the param's dtype (8-bit:
  // codes and fp32 scales). `pieces` (8-bit only; empty: one piece, the whole parameter).
  void add(at::Tensor param, at::Tensor grad, std::vector<StatePiece> pieces = {});

  void step(double lr, const PieceObserver& updated = nullptr, double grad_scale = 1.0) override;

  // An operation at a time, contiguous tensors are updated in pieces of this many elements (64 MiB
  // of fp32), bounding the temporaries; the fused host pass needs none. With an observer, both
  // update pieces of kObservedPieceElements (512 KiB of fp32 per tensor), so that the observer
  // reads the piece from cache.
  static constexpr int64_t kPieceElements = int64_t{1} << 24;
  static constexpr int64_t kObservedPieceElements = int64_t{1} << 17;
  // The fused host update splits a tensor over LibTorch's intra-op threads in chunks of at least this.
  static constexpr int64_t kGrainElements = int64_t{1} << 16;

  // Whether parameter i is updated in one fused pass (see above).
  bool fused(size_t i) const;

  void reset_state() override;
  int64_t state_bytes() const override;
  bool all_finite() const override;  // checked a piece at a time
  std::string name() const override { return config_.blockwise_8bit ? "adamw_8bit" : "adamw"; }
  std::string description() const override {
    return config_.blockwise_8bit ? "AdamW with 8-bit block-wise moments" : "AdamW";
  }
  const AdamWConfig& config() const { return config_; }
  // fp32 (or the params' dtype) moments; not with blockwise_8bit.
  at::Tensor& exp_avg(size_t i);
  at::Tensor& exp_avg_sq(size_t i);
  // blockwise_8bit: the codes (uint8, a whole number of blocks covering the parameter; none when
  // no piece is quantized) and the blocks' scales (fp32) of the first (moment 0) and second (1)
  // moment of parameter i.
  at::Tensor& codes(size_t i, int moment);
  at::Tensor& absmax(size_t i, int moment);
  // blockwise_8bit: a moment of parameter i decoded (code · scale; the fp32 moments of pieces not
  // quantized), fp32 on the host, shaped like the parameter; elements outside its pieces are zero.
  at::Tensor decoded(size_t i, int moment) const;
  // blockwise_8bit: sets parameter i's codes from decoded moments (host fp32, shaped like the
  // parameter) and the scales already in absmax(i, ·), as a checkpoint holds them. Every element of
  // the pieces must be a code times its block's scale, as decoded() gives them: returns the first
  // element that is not (nothing is changed then).
  std::optional<int64_t> encode_moments(size_t i, const at::Tensor& exp_avg, const at::Tensor& exp_avg_sq);

 private:
  enum class Path { kOps, kHostFused, kDeviceKernel, kDeviceFused };
  Path path(size_t i) const;
  void step_ops(size_t i, double lr, double bias_correction1, double bias_correction2_sqrt, const PieceObserver& updated);
  void step_host_fused(size_t i, double lr, double bias_correction1, double bias_correction2_sqrt,
                       double grad_scale, const PieceObserver& updated);
  void step_device_fused(const std::vector<size_t>& params, double lr, double grad_scale);
  void step_8bit(size_t i, double lr);

  AdamWConfig config_;
  std::vector<at::Tensor> params_, grads_, exp_avg_, exp_avg_sq_;
  // blockwise_8bit
  std::vector<std::vector<StatePiece>> pieces_;
  std::vector<at::Tensor> codes1_, codes2_, absmax1_, absmax2_;
  std::vector<std::vector<at::Tensor>> piece_m_, piece_v_;  // fp32 moments of pieces not quantized
  std::vector<at::Tensor> maps_;  // signed, unsigned; on the first parameter's device
  // The device-fused parameters' step counts on each device (float32, as the kernel reads them),
  // kept there between steps: `counts` are the values they hold, of the parameters `members`.
  struct DeviceSteps {
    std::vector<size_t> members;
    std::vector<int64_t> counts;
    at::Tensor values;
  };
  std::map<int, DeviceSteps> device_steps_;
};

}  // namespace shardtune::fsdp
