// The training loop.
#include "runtime/train/trainer.h"

#include <ATen/core/grad_mode.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/full.h>
#include <ATen/ops/tensor.h>
#include <ATen/record_function.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <cmath>
#include <fstream>
#include <optional>

#include "common/error.h"
#include "common/process_memory.h"
#include "runtime/dist/device.h"
#include "runtime/model/lora.h"
#include "runtime/model/loss.h"
#include "runtime/train/data_order.h"
#include "runtime/train/lr_schedule.h"
#include "runtime/train/metrics_file.h"
#include "runtime/train/prefetch.h"
#include "runtime/train/profiler.h"
#include "runtime/train/step_metrics.h"
#include "runtime/train/stop_request.h"
#include "runtime/train/train_step.h"

namespace shardtune::train {
namespace {

using Clock = std::chrono::steady_clock;

// The samples of a micro-batch as tensors; shorter samples are padded at the end to the longest
// (pad id, label -100): a causal model never lets real tokens see the padding after them.
Batch collate(const Dataset& data, const std::vector<int64_t>& indices) {
  const int64_t b = static_cast<int64_t>(indices.size());
  std::vector<Sample> samples;
  int64_t t = 0;
  for (const int64_t index : indices) {
    samples.push_back(data.get(index));
    t = std::max(t, static_cast<int64_t>(samples.back().input_ids.size()));
  }
  Batch batch{at::full({b, t}, data.pad_id(), at::kLong), at::full({b, t}, model::kIgnoreIndex, at::kLong), {}};
  if (!samples[0].position_ids.empty()) batch.position_ids = at::empty({b, t}, at::kLong);
  for (int64_t i = 0; i < b; ++i) {
    const Sample& s = samples[static_cast<size_t>(i)];
    ST_CHECK(s.labels.size() == s.input_ids.size() && (!batch.position_ids.defined() || static_cast<int64_t>(s.input_ids.size()) == t),
             common::ErrorKind::kInternal, "sample {} has {} tokens and {} labels; the batch {} tokens",
             indices[static_cast<size_t>(i)], s.input_ids.size(), s.labels.size(), t);
    std::copy(s.input_ids.begin(), s.input_ids.end(), batch.input_ids.data_ptr<int64_t>() + i * t);
    std::copy(s.labels.begin(), s.labels.end(), batch.labels.data_ptr<int64_t>() + i * t);
    if (batch.position_ids.defined()) {
      ST_CHECK(static_cast<int64_t>(s.position_ids.size()) == t, common::ErrorKind::kInternal,
               "sample {} has {} positions for {} tokens", indices[static_cast<size_t>(i)], s.position_ids.size(), t);
      std::copy(s.position_ids.begin(), s.position_ids.end(), batch.position_ids.data_ptr<int64_t>() + i * t);
    }
  }
  return batch;
}

// What the ranks agree on after a step, in one reduction: the stop signal any rank received (the
// largest signal number) and the largest memory peaks of any rank during the step.
struct AfterStep {
  int stop_signal = 0;
  int64_t peak_rss = 0;
  dist::DeviceMemoryStats device;
};

AfterStep agree_after_step(dist::Communicator& world, const c10::Device& device) {
  const dist::DeviceMemoryStats d = dist::memory_stats(device);
  at::Tensor v = at::tensor({static_cast<double>(stop_signal()), static_cast<double>(common::peak_resident_bytes()),
                             static_cast<double>(d.peak_allocated), static_cast<double>(d.peak_reserved)},
                            at::kDouble);
  world.all_reduce(v, dist::ReduceOp::kMax);
  const auto value = [&](int64_t i) { return v[i].item<double>(); };
  AfterStep out;
  out.stop_signal = static_cast<int>(value(0));
  out.peak_rss = static_cast<int64_t>(value(1));
  out.device.peak_allocated = static_cast<int64_t>(value(2));
  out.device.peak_reserved = static_cast<int64_t>(value(3));
  return out;
}

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// The peak FLOP/s per rank MFU is measured against: the job's, else the GPU's from the table.
std::optional<double> peak_flops(const job::MetricsSection& m, const c10::Device& device) {
  if (m.peak_tflops > 0) {
    spdlog::info("metrics: MFU against {} TFLOP/s per rank ([metrics] peak_tflops)", m.peak_tflops);
    return m.peak_tflops * 1e12;
  }
  if (!device.is_cuda()) {
    spdlog::info("metrics: no MFU on the CPU unless [metrics] peak_tflops gives the peak");
    return std::nullopt;
  }
  const std::string name = dist::device_name(device);
  const std::optional<double> peak = gpu_bf16_peak_flops(name);
  if (peak) {
    spdlog::info("metrics: MFU against {} TFLOP/s per rank, the dense bf16 peak of {}", *peak / 1e12, name);
  } else {
    spdlog::warn("metrics: no MFU: the bf16 peak of {} is not known; set [metrics] peak_tflops", name);
  }
  return peak;
}

std::string duration_text(double seconds) {
  const int64_t s = static_cast<int64_t>(seconds + 0.5);
  return fmt::format("{}:{:02d}:{:02d}", s / 3600, (s / 60) % 60, s % 60);
}

}  // namespace

Trainer::Trainer(TrainerOptions options, dist::ProcessGroups& groups, fsdp::FsdpLlama& model, const Dataset& train,
                 const Dataset* val, CheckpointHooks hooks)
    : options_(std::move(options)),
      groups_(groups),
      model_(model),
      train_(train),
      val_(val),
      hooks_(std::move(hooks)) {}

Trainer::Validation Trainer::validate() {
  at::NoGradGuard no_grad;
  const int ranks = groups_.world->size(), rank = groups_.world->rank();
  const int64_t per_rank = options_.train.val_batch_size;
  int64_t batches = val_->size() / (per_rank * ranks);
  if (options_.train.max_eval_step > 0) batches = std::min(batches, options_.train.max_eval_step);
  double sum = 0;
  for (int64_t b = 0; b < batches; ++b) {
    std::vector<int64_t> indices;
    for (int64_t i = 0; i < per_rank; ++i) indices.push_back((b * ranks + rank) * per_rank + i);
    const Batch batch = collate(*val_, indices);
    sum += model::causal_lm_loss(model_.forward(batch.input_ids, batch.position_ids), batch.labels.to(model_.device()))
               .item<double>();
  }
  at::Tensor mean = at::full({1}, batches > 0 ? sum / static_cast<double>(batches) : 0.0, at::kDouble);
  groups_.world->all_reduce(mean, dist::ReduceOp::kAvg);
  return {mean.item<double>(), batches};
}

TrainSummary Trainer::run() {
  const job::TrainSection& t = options_.train;
  const int ranks = groups_.world->size(), rank = groups_.world->rank();
  const int accumulation = static_cast<int>(t.gradient_accumulation_steps);
  const int64_t global_batch = t.batch_size_training * ranks * accumulation;
  const DataOrder order(train_.size(), global_batch, static_cast<uint64_t>(t.seed), train_.lengths());
  int64_t total_steps = order.steps_per_epoch() * t.num_epochs;
  if (t.max_train_step > 0) total_steps = std::min(total_steps, t.max_train_step);
  const LrSchedule schedule(t, total_steps);

  fsdp::AdamW optimizer({0.9, 0.999, 1e-8, t.weight_decay});
  add_trainable_shards(model_, optimizer);
  StepOptions step_options{t.lr, t.gradient_clipping, t.gradient_clipping_threshold, true};
  fsdp::LossScaler scaler;
  if (model_.options().precision.compute == at::kHalf) step_options.loss_scaler = &scaler;

  spdlog::info("training: {} steps ({} per epoch, {} epoch(s)), global batch {} = {} per rank x {} ranks x {} "
               "accumulation",
               total_steps, order.steps_per_epoch(), t.num_epochs, global_batch, t.batch_size_training, ranks,
               accumulation);

  ResumePoint from;
  if (hooks_.resume)
    if (std::optional<ResumePoint> r = hooks_.resume(optimizer)) {
      from = *r;
      if (step_options.loss_scaler != nullptr && from.loss_scale > 0) scaler.set_scale(from.loss_scale);
      spdlog::info("resuming at step {} (epoch {}, at sample {} of its {} in the global order)", from.step, from.epoch + 1,
                   from.sample_in_epoch, order.dataset_size());
    }
  // metrics.jsonl holds this run's steps up to where it continues, each once.
  const std::string metrics_path = options_.output_dir + "/metrics.jsonl";
  const std::string recipes_path = options_.output_dir + "/metrics_data.json";
  const job::MetricsSection& m = options_.metrics;
  std::ofstream metrics;
  if (rank == 0 && m.jsonl) {
    trim_metrics(metrics_path, from.step);
    metrics.open(metrics_path, std::ios::app);
    ST_CHECK(metrics.good(), common::ErrorKind::kIo, "cannot append to {}", metrics_path);
  }
  auto write_recipes = [&] {
    if (rank == 0 && m.save_metrics) write_recipes_metrics(metrics_path, recipes_path);
  };
  const std::optional<double> peak = m.jsonl ? peak_flops(m, model_.device()) : std::nullopt;
  step_options.measure_grad_norm = m.jsonl;
  step_options.model_config = &options_.model_config;
  StepProfiler profiler(
      {m.use_profiler, m.profiler_dir, m.profiler_wait_steps, m.profiler_warmup_steps, m.profiler_active_steps,
       m.flop_counter, m.flop_counter_start + 1, model_.device().is_cuda()},
      rank);
  const int64_t every = options_.checkpoint_every_steps;
  // Where the epoch's global order stands is a sample position, so a resume with another
  // global batch (another world size) continues it exactly.
  const int64_t epoch_samples = order.dataset_size();
  auto save = [&](int64_t steps_taken, int64_t epoch, int64_t next_sample) {
    if (!hooks_.save) return;
    RECORD_USER_SCOPE("checkpoint.save");
    const bool epoch_done = next_sample + global_batch > epoch_samples;
    hooks_.save(optimizer, {steps_taken, epoch_done ? epoch + 1 : epoch, epoch_done ? 0 : next_sample,
                            step_options.loss_scaler != nullptr ? scaler.scale() : 0.0});
  };

  TrainSummary summary;
  const auto start = Clock::now();
  double window_seconds = 0;
  int64_t window_steps = 0, window_tokens = 0, total_tokens = 0;  // this rank's tokens, padding included
  int64_t step = from.step;
  int prefetch_depth_seen = 0;  // num_workers_dataloader as it took effect
  for (int64_t epoch = from.epoch; epoch < t.num_epochs && step < total_steps; ++epoch) {
    const std::vector<int64_t> permutation = order.permutation(epoch);
    const int64_t first = epoch == from.epoch ? from.sample_in_epoch : 0;
    // Collating reads only the dataset and this epoch's permutation: safe on other threads.
    Prefetcher prefetch(
        [&](int64_t cursor) {
          std::vector<Batch> micro;
          for (int m = 0; m < accumulation; ++m)
            micro.push_back(collate(train_, order.samples(permutation, cursor, m, accumulation, rank, ranks)));
          return micro;
        },
        static_cast<int>(t.num_workers_dataloader));
    for (int64_t cursor = first; cursor + global_batch <= epoch_samples && step < total_steps;
         cursor += global_batch, ++step) {
      if (m.jsonl) {
        common::reset_peak_resident();
        dist::reset_peak_memory(model_.device());
      }
      const int64_t run_step = step - from.step + 1;  // the profiler counts this run's steps
      profiler.begin_step(run_step);
      const double comm_before = model_.comm_stats().seconds;
      const auto step_start = Clock::now();
      std::vector<Batch> micro;
      StepResult r;
      double data_wait = 0, seconds = 0;
      const double loss_scale = step_options.loss_scaler != nullptr ? scaler.scale() : 0.0;
      {
        RECORD_USER_SCOPE(fmt::format("step {}", step + 1));
        std::vector<int64_t> upcoming;
        for (int64_t k = 1; k <= t.num_workers_dataloader; ++k) {
          const int64_t next = cursor + k * global_batch;
          if (next + global_batch > epoch_samples || step + k >= total_steps) break;
          upcoming.push_back(next);
        }
        {
          RECORD_USER_SCOPE("data.wait");
          micro = prefetch.take(cursor, upcoming);
        }
        data_wait = seconds_since(step_start);
        step_options.lr = schedule.lr(step, epoch);
        // Dropout masks follow from the seed, the step and the rank: a rerun or a resume at the
        // same world size draws the same ones.
        step_options.dropout = {true, model::mix_seed(model::mix_seed(static_cast<uint64_t>(t.seed), step), rank)};
        r = train_step(model_, optimizer, micro, step_options, *groups_.world);
        seconds = seconds_since(step_start);
      }
      std::optional<double> counted_flops = profiler.end_step(run_step);
      if (counted_flops) {
        at::Tensor sum = at::full({1}, *counted_flops, at::kDouble);
        groups_.world->all_reduce(sum, dist::ReduceOp::kSum);
        counted_flops = sum.item<double>();
        spdlog::info("flop counter: step {} multiplied {:.6g} TFLOP in matrix products over all ranks ({:.4g} "
                     "TFLOP/s); the estimate 6·N + 12·L·d·T gives {:.6g} TFLOP ({:.4f} of the count)",
                     step + 1, *counted_flops / 1e12, *counted_flops / 1e12 / seconds, r.flops / 1e12,
                     r.flops / *counted_flops);
      }
      summary.losses.push_back(r.loss);
      window_seconds += seconds;
      ++window_steps;
      for (const Batch& b : micro) window_tokens += b.input_ids.numel();
      const bool last = step + 1 == total_steps;
      AfterStep agreed;
      if (!last || m.jsonl) agreed = agree_after_step(*groups_.world, model_.device());
      if (metrics.is_open()) {
        StepRecord record{step + 1, epoch + 1, cursor, cursor + global_batch, r.loss, step_options.lr};
        if (step_options.gradient_clipping || step_options.measure_grad_norm) record.grad_norm = r.grad_norm;
        if (step_options.loss_scaler != nullptr) {
          record.loss_scale = loss_scale;
          record.skipped = r.skipped;
        }
        record.tokens = r.tokens;
        record.flops = r.flops;
        record.counted_flops = counted_flops;
        record.step_seconds = seconds;
        record.comm_wait_seconds = model_.comm_stats().seconds - comm_before;
        record.data_wait_seconds = data_wait;
        if (peak) record.mfu = model_flops_utilisation(r.flops, seconds, *peak, ranks);
        record.peak_rss_bytes = agreed.peak_rss;
        if (model_.device().is_cuda()) {
          record.gpu_peak_allocated_bytes = agreed.device.peak_allocated;
          record.gpu_peak_reserved_bytes = agreed.device.peak_reserved;
        }
        metrics << jsonl_line(record) << std::flush;
      }
      const bool saved = (every > 0 && (step + 1) % every == 0) || last;
      if (saved) {
        save(step + 1, epoch, cursor + global_batch);
        // A signal that arrived during the save stops the ranks at this boundary, not the next.
        if (!last) agreed.stop_signal = agree_after_step(*groups_.world, model_.device()).stop_signal;
      }
      if (!last) summary.stop_signal = agreed.stop_signal;
      if (summary.stop_signal != 0) {
        spdlog::warn("signal {} asked the job to stop: {} after step {}", summary.stop_signal,
                     hooks_.save ? "checkpointing" : "stopping", step + 1);
        if (!saved) save(step + 1, epoch, cursor + global_batch);
      }
      if ((step + 1) % options_.metrics.log_every_steps == 0 || step + 1 == total_steps) {
        const double per_step = window_seconds / static_cast<double>(window_steps);
        spdlog::info("step {}/{} | epoch {}/{} | loss {:.4f} | lr {:.3e} | {:.0f} tok/s | {:.3f} s/step | ETA {}",
                     step + 1, total_steps, epoch + 1, t.num_epochs, r.loss, step_options.lr,
                     static_cast<double>(window_tokens * ranks) / window_seconds, per_step,
                     duration_text(per_step * static_cast<double>(total_steps - step - 1)));
        total_tokens += window_tokens;
        window_seconds = 0;
        window_steps = 0;
        window_tokens = 0;
      }
      if (summary.stop_signal != 0) {
        ++step;
        break;
      }
    }
    prefetch_depth_seen = std::max(prefetch_depth_seen, prefetch.most_ahead());
    if (summary.stop_signal != 0) break;
    if (t.run_validation && val_ != nullptr) {
      Validation v;
      {
        RECORD_USER_SCOPE("validation");
        v = validate();
      }
      summary.last_val_loss = v.loss;
      if (metrics.is_open()) metrics << jsonl_line(EvalRecord{epoch + 1, step, v.loss, v.batches}) << std::flush;
      write_recipes();
      spdlog::info("epoch {} validation: loss {:.4f}, perplexity {:.3f} ({} batch(es) of {} row(s) per rank{})",
                   epoch + 1, v.loss, std::exp(v.loss), v.batches, t.val_batch_size,
                   t.max_eval_step > 0 ? fmt::format(", max_eval_step = {}", t.max_eval_step) : "");
    }

  }
  spdlog::info("data: {}", prefetch_depth_seen == 0
                               ? std::string("batches collated on the training thread")
                               : fmt::format("batches collated up to {} step(s) ahead, each on its own thread",
                                             prefetch_depth_seen));
  if (metrics.is_open()) metrics.close();
  write_recipes();
  summary.steps = step - from.step;
  const double total_seconds = std::chrono::duration<double>(Clock::now() - start).count();
  total_tokens += window_tokens;
  summary.tokens_per_second = static_cast<double>(total_tokens * ranks) / std::max(total_seconds, 1e-9);
  return summary;
}

}  // namespace shardtune::train
