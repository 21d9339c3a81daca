// The sharded training step.
#include "runtime/train/train_step.h"

#include <ATen/TensorOperators.h>
#include <ATen/ops/zeros.h>
#include <ATen/record_function.h>
#include <fmt/format.h>

#include <cmath>
#include <initializer_list>
#include <limits>
#include <utility>

#include "common/error.h"
#include "runtime/fsdp/adafactor.h"
#include "runtime/fsdp/adam8bit.h"
#include "runtime/fsdp/adamw.h"
#include "runtime/model/lora.h"
#include "runtime/train/flops.h"

namespace shardtune::train {

void add_trainable_shards(fsdp::FsdpLlama& model, fsdp::Optimizer& optimizer) {
  for (fsdp::FlatParam* f : model.flat_params()) {
    if (!f->trainable()) continue;
    if (auto* adafactor = dynamic_cast<fsdp::Adafactor*>(&optimizer)) {
      adafactor->add(f->shard(), f->grad_shard(), f->layout(), f->shard_rank());
      continue;
    }
    auto& adamw = dynamic_cast<fsdp::AdamW&>(optimizer);
    std::vector<fsdp::StatePiece> pieces;
    // The 8-bit state's blocks are each tensor's own: the pieces of tensors in this shard (the
    // layout aligns them to the block, FsdpOptions::trainable_align).
    if (adamw.config().blockwise_8bit)
      for (const fsdp::ShardPiece& piece : f->layout().pieces_in_shard(f->shard_rank()))
        pieces.push_back({piece.shard_offset, piece.length,
                          fsdp::quantized_state(f->layout().params()[piece.param].name,
                                                f->layout().params()[piece.param].numel)});
    if (adamw.config().blockwise_8bit && pieces.empty()) pieces.push_back({0, 0});  // a shard of padding alone
    adamw.add(f->shard(), f->grad_shard(), std::move(pieces));
  }
}

namespace {

// This rank's failed group, if any, once backward's collectives are done (a test's fault marks one).
std::string groups_failure_before_update(const StepOptions& options) {
  if (options.groups == nullptr) return {};
  const dist::ProcessGroups& g = *options.groups;
  if (!options.fail_group.empty()) {
    const std::pair<const char*, dist::Communicator*> roles[] = {
        {"world", g.world.get()}, {"shard", g.shard.get()}, {"replicate", g.replicate.get()}};
    for (const auto& [role, c] : roles)
      if (options.fail_group == role) c->mark_failed("marked failed by SHARDTUNE_TEST_GROUP_FAIL_AT");
  }
  return dist::groups_failure(*options.groups);
}

// After the host's wait: a group that failed on any rank (`failing` of them), or here meanwhile (an
// asynchronous NCCL error, a collective the watchdog gave up on), may have let partial sums
// through. No update is made from them.
void refuse_update_after_failure(const StepOptions& options, std::string failed, double failing) {
  if (options.groups == nullptr) return;
  if (failed.empty()) failed = dist::groups_failure(*options.groups);
  if (failed.empty() && failing == 0) return;
  common::raise(common::ErrorKind::kPeerLost,
                fmt::format("a communicator failed during the step ({} rank(s) saw it{}{}), so its results are not "
                            "trusted: the optimizer step was not taken",
                            failing, failed.empty() ? "" : "; here: ", failed));
}

// A micro-batch's mean loss: the next-token loss, or for pairs DPO's (its metric sums added to
// `dpo_sums` unless the micro-batch is a placeholder).
at::Tensor micro_batch_loss(fsdp::FsdpLlama& model, const Batch& b, const model::DropoutSeed& dropout,
                            const StepOptions& options, at::Tensor& dpo_sums) {
  if (b.pairs == 0) return model.forward_loss(b.input_ids, b.position_ids, b.labels, dropout);
  ST_CHECK(options.preference != nullptr, common::ErrorKind::kInternal, "preference pairs without an objective");
  return dpo_batch_loss(model, b, dropout, *options.preference, b.weight == 0.0 ? nullptr : &dpo_sums);
}

// Device elements set from host values, each filled by the device: a copy from pageable host memory
// would make the host wait here for all the work queued before it (the whole backward).
void fill_from_host(at::Tensor out, std::initializer_list<double> values) {
  int64_t k = 0;
  for (double v : values) out.narrow(0, k++, 1).fill_(v);
}

}  // namespace

StepResult train_step(fsdp::FsdpLlama& model, fsdp::Optimizer& optimizer, const std::vector<Batch>& micro_batches,
                      const StepOptions& options, dist::Communicator& world) {
  ST_CHECK(!micro_batches.empty(), common::ErrorKind::kInternal, "a training step without micro-batches");
  const double n = static_cast<double>(micro_batches.size());
  // The loss is summed on the device and read once, at the end of the step: reading it per
  // micro-batch would make the host wait for each backward before queueing the next. The rank's
  // tokens and FLOPs ride in the same reduction, and so does the gradient norm (squared, from
  // world rank 0 alone), so that the step's one host wait also brings it.
  // DPO's metric sums follow the five totals, in the same reduction.
  const int64_t extra = options.preference != nullptr ? kDpoSums : 0;
  at::Tensor totals = at::zeros({5 + extra}, at::TensorOptions().dtype(at::kDouble).device(model.device()));
  at::Tensor loss_sum = totals.narrow(0, 0, 1);
  at::Tensor dpo_sums = extra > 0 ? totals.narrow(0, 5, extra) : at::Tensor();
  double tokens = 0, flops = 0;
  for (size_t i = 0; i < micro_batches.size(); ++i) {
    const Batch& b = micro_batches[i];
    model.set_sync_grads(options.reduce_every_micro_batch || i + 1 == micro_batches.size());
    const model::DropoutSeed dropout{options.dropout.enabled, model::mix_seed(options.dropout.seed, i)};
    // Averaging over micro-batches here and over ranks in the reduction gives the gradient of
    // the mean loss of the whole global batch. The loss has its own range in a trace ("train.loss").
    at::Tensor loss = micro_batch_loss(model, b, dropout, options, dpo_sums) / n;
    if (b.weight != 1.0) loss = loss * b.weight;
    if (options.loss_scaler != nullptr) {
      (loss * options.loss_scaler->scale()).backward();
    } else {
      loss.backward();
    }
    model.finish_grad_sync();  // backward's own end-of-pass callback has normally done it
    loss_sum += loss.detach().to(at::kDouble);
    if (b.weight == 0.0) continue;  // a placeholder trains nothing
    const int64_t seq_len = b.input_ids.size(-1);
    tokens += static_cast<double>(b.input_ids.numel());
    if (options.model_config != nullptr)
      flops += static_cast<double>(b.input_ids.numel()) * training_flops_per_token(*options.model_config, seq_len);
  }
  // The step's loss is known before the update, so a non-finite one never reaches the shards.
  if (options.poison_loss) loss_sum.fill_(std::numeric_limits<double>::quiet_NaN());
  // Each rank's failed groups ride in the step's one reduction: every rank learns of any.
  const std::string failed = groups_failure_before_update(options);
  fill_from_host(totals.narrow(0, 1, 3), {tokens, flops, failed.empty() ? 0.0 : 1.0});
  // Without a loss scaler the gradients are final here (with one, they are unscaled first, below).
  const bool norm_now = options.loss_scaler == nullptr && (options.gradient_clipping || options.measure_grad_norm);
  if (norm_now) {
    const at::Tensor squared = model.grad_norm_squared();
    if (world.rank() == 0) totals.narrow(0, 4, 1).copy_(squared);
  }
  world.all_reduce(totals, dist::ReduceOp::kSum);
  const at::Tensor host = totals.cpu();
  refuse_update_after_failure(options, failed, host[3].item<double>());
  StepResult result;
  result.loss = host[0].item<double>() / static_cast<double>(world.size());
  result.tokens = static_cast<int64_t>(host[1].item<double>());
  result.flops = host[2].item<double>();
  if (extra > 0) result.preference = preference_metrics(host.data_ptr<double>() + 5);
  if (options.loss_scaler != nullptr && !options.loss_scaler->unscale_and_check(model.flat_params(), world)) {
    result.skipped = true;  // fp16 overflow: the scaler lowers its scale and the step is retried with the next batch
    result.nonfinite = !std::isfinite(result.loss);
  } else {
    RECORD_USER_SCOPE("optimizer.step");
    if (norm_now) {
      result.grad_norm = std::sqrt(host[4].item<double>());
    } else if (options.gradient_clipping || options.measure_grad_norm) {
      result.grad_norm = model.grad_norm();  // unscaled by the loss scaler first
    }
    result.nonfinite = !std::isfinite(result.loss) || !std::isfinite(result.grad_norm);
    if (result.nonfinite) {
      result.skipped = true;
    } else {
      if (options.before_update) options.before_update();
      // Clipping is the optimizer's gradient scale: no pass over the gradients of its own.
      const double clip =
          options.gradient_clipping ? fsdp::FsdpLlama::clip_coefficient(result.grad_norm, options.clipping_threshold) : 1.0;
      optimizer.step(options.lr, options.updated_piece, clip);
    }
  }
  model.zero_grad();
  return result;
}

}  // namespace shardtune::train
