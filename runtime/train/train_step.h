// One optimizer step of sharded training: forward and backward over the rank's micro-batches
// (gradients reduced at every micro-batch or only at the last), clipping by the global norm,
// the optimizer (AdamW, 8-bit AdamW or Adafactor) on the shards.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "runtime/fsdp/optimizer.h"
#include "runtime/fsdp/fsdp_llama.h"
#include "runtime/fsdp/loss_scaler.h"
#include "runtime/model/llama_config.h"
#include "runtime/dist/process_groups.h"
#include "runtime/train/batch.h"
#include "runtime/train/dpo.h"

namespace shardtune::train {

struct StepOptions {
  double lr = 1e-4;
  bool gradient_clipping = false;
  double clipping_threshold = 1.0;
  bool reduce_every_micro_batch = true;
  fsdp::LossScaler* loss_scaler = nullptr;  // fp16 compute: scale the loss, skip overflowing steps
  // LoRA dropout of the step: micro-batch i draws from mix_seed(dropout.seed, i). Disabled: none.
  model::DropoutSeed dropout{};
  // Also compute the gradient norm when clipping is off (for metrics).
  bool measure_grad_norm = false;
  // The model's shapes, to count the step's training FLOPs; null: not counted.
  const model::LlamaConfig* model_config = nullptr;
  // Called before the optimizer changes the shards and moments (a checkpoint still copying them
  // in the background waits here); may be empty.
  std::function<void()> before_update = nullptr;
  // Told of each piece the optimizer updates (Optimizer::PieceObserver); may be empty.
  fsdp::Optimizer::PieceObserver updated_piece = nullptr;
  // This rank's loss is NaN, as a diverging run's (a test's fault: common/fault_injection.h).
  bool poison_loss = false;
  // The groups whose health is checked after the step's host synchronisation, before the update
  // (dist::groups_failure); null: none. A failed group on any rank stops the step on every rank
  // (common::Error kPeerLost) with the optimizer untouched.
  const dist::ProcessGroups* groups = nullptr;
  // A test's fault: mark this group failed once backward's collectives are done (fault_injection.h).
  std::string fail_group;
  // [train] objective = "dpo": micro-batches of pairs train on DPO's loss; null: the next-token loss.
  const PreferenceObjective* preference = nullptr;
};

struct StepResult {
  double loss = 0;       // mean over micro-batches and data-parallel ranks
  double grad_norm = 0;  // before clipping; 0 when neither clipping nor measured
  bool skipped = false;  // no update was made: fp16 overflow, or a non-finite loss or gradient norm
  bool nonfinite = false;  // the loss or the gradient norm (when measured) was not finite
  int64_t tokens = 0;    // of the global batch (every rank's micro-batches), padding included
  double flops = 0;      // training FLOPs of the global batch; 0 without a model_config
  std::optional<PreferenceMetrics> preference;  // DPO's rewards and log-probabilities over the global batch
};

// Registers every trainable shard with the optimizer (frozen ones get no state).
void add_trainable_shards(fsdp::FsdpLlama& model, fsdp::Optimizer& optimizer);

// Collective over the model's process groups. Every rank must pass the same number of micro-batches.
// A step whose loss or gradient norm is not finite makes no update (every rank sees the same
// reduced values, so all skip alike).
StepResult train_step(fsdp::FsdpLlama& model, fsdp::Optimizer& optimizer, const std::vector<Batch>& micro_batches,
                      const StepOptions& options, dist::Communicator& world);

}  // namespace shardtune::train
