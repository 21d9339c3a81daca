// The training loop.
#include "runtime/train/trainer.h"

#include <ATen/core/grad_mode.h>
#include <ATen/ops/full.h>
#include <ATen/ops/tensor.h>
#include <ATen/record_function.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <cmath>
#include <optional>

#include "common/error.h"
#include "common/fault_injection.h"
#include "common/process_memory.h"
#include "runtime/data/mixed_dataset.h"
#include "runtime/dist/device.h"
#include "runtime/dist/text_collectives.h"
#include "runtime/fsdp/adafactor.h"
#include "runtime/fsdp/adamw.h"
#include "runtime/model/lora.h"
#include "runtime/model/loss.h"
#include "runtime/train/collate.h"
#include "runtime/train/data_order.h"
#include "runtime/train/evaluate.h"
#include "runtime/train/host_allocator.h"
#include "runtime/train/metrics_log.h"
#include "runtime/train/nonfinite_guard.h"
#include "runtime/train/prefetch.h"
#include "runtime/train/profiler.h"
#include "runtime/train/step_metrics.h"
#include "runtime/train/stop_request.h"
#include "runtime/train/tensorboard_log.h"
#include "runtime/train/throughput_window.h"
#include "runtime/train/train_step.h"

namespace shardtune::train {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

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
  return {static_cast<int>(value(0)), static_cast<int64_t>(value(1)),
          {0, static_cast<int64_t>(value(2)), 0, static_cast<int64_t>(value(3))}};
}

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

// The flop counter's step (`counting`): every rank's count summed and set against the estimate. Every
// rank takes part in the sum even when its profiler failed, so none waits for another.
std::optional<double> counted_flops(StepProfiler& profiler, int64_t run_step, bool counting, int64_t step,
                                    double seconds, double estimate, dist::Communicator& world) {
  const std::optional<double> mine = profiler.end_step(run_step);
  if (!counting) return std::nullopt;
  at::Tensor sum = at::tensor({mine.value_or(0.0), mine ? 0.0 : 1.0}, at::kDouble);
  world.all_reduce(sum, dist::ReduceOp::kSum);
  if (sum[1].item<double>() > 0) return std::nullopt;  // some rank has no count
  const double all = sum[0].item<double>();
  spdlog::info("flop counter: step {} multiplied {:.6g} TFLOP in matrix products over all ranks ({:.4g} TFLOP/s); "
               "the estimate 6·N + 12·L·d·T gives {:.6g} TFLOP ({:.4f} of the count)",
               step, all / 1e12, all / 1e12 / seconds, estimate / 1e12, estimate / all);
  return all;
}

// Every rank's sample ids of the step, in rank order, on rank 0 (empty elsewhere).
std::vector<std::vector<int64_t>> gather_ids(dist::Communicator& world, const std::vector<int64_t>& mine) {
  std::vector<std::vector<int64_t>> out;
  for (const std::string& text : dist::gather_text(world, fmt::format("{}", fmt::join(mine, " ")))) {
    std::vector<int64_t>& ids = out.emplace_back();
    for (size_t at = 0; at < text.size();) {
      size_t used = 0;
      ids.push_back(std::stoll(text.substr(at), &used));
      at += used;
    }
  }
  return out;
}

// The job's optimizer over the shards of `shard_group`.
std::unique_ptr<fsdp::Optimizer> make_optimizer(const job::TrainSection& t, dist::Communicator& shard_group) {
  if (t.optimizer == job::Optimizer::kAdafactor) {
    fsdp::AdafactorConfig c;
    c.eps1 = t.adafactor_eps;
    c.eps2 = t.adafactor_eps_scale;
    c.clip_threshold = t.adafactor_clip_threshold;
    c.decay_rate = t.adafactor_decay_rate;
    c.beta1 = t.adafactor_beta1;
    c.weight_decay = t.weight_decay;
    c.scale_parameter = t.adafactor_scale_parameter;
    c.relative_step = t.adafactor_relative_step;
    c.warmup_init = t.adafactor_warmup_init;
    return std::make_unique<fsdp::Adafactor>(c, &shard_group);
  }
  return std::make_unique<fsdp::AdamW>(fsdp::AdamWConfig{0.9, 0.999, 1e-8, t.weight_decay, /*fused=*/true,
                                                         /*blockwise_8bit=*/t.optimizer == job::Optimizer::kAdamW8bit});
}

// The samples of each source in the step's span; empty with one source.
std::vector<int64_t> source_counts(const data::Mixture& mixture, const std::vector<int64_t>& order,
                                   const StepSpan& span) {
  if (mixture.sources().size() < 2) return {};
  std::vector<int64_t> counts(mixture.sources().size(), 0);
  for (int64_t p = span.begin; p < span.end; ++p) ++counts[static_cast<size_t>(mixture.source_of(order[static_cast<size_t>(p)]))];
  return counts;
}

}  // namespace

struct Trainer::Run {
  Run(const TrainerOptions& o, const dist::ProcessGroups& groups, const data::Dataset& train)
      : ranks(groups.world->size()),
        rank(groups.world->rank()),
        accumulation(static_cast<int>(o.train.gradient_accumulation_steps)),
        global_batch(o.train.global_batch(ranks)),
        order(o.mixture.empty() ? data::Mixture::single(train.size()) : o.mixture, static_cast<uint64_t>(o.train.seed),
              train.lengths()),
        optimizer(make_optimizer(o.train, *groups.shard)),
        step{o.train.lr, o.train.gradient_clipping, o.train.gradient_clipping_threshold, true},
        guard(o.train.on_nonfinite, o.train.max_nonfinite_skips) {}

  const int ranks, rank, accumulation;
  const int64_t global_batch;
  const DataOrder order;
  std::optional<RunSchedule> schedule;  // once the checkpoint says which batch the step counts mean
  std::unique_ptr<fsdp::Optimizer> optimizer;
  StepOptions step;
  fsdp::LossScaler scaler;
  ResumePoint from;
  Cursor cursor;
  int64_t steps_taken = 0;  // by the whole job, counting earlier runs
  std::optional<MetricsLog> metrics;
  std::optional<TensorboardLog> tensorboard;
  void write_record(const std::string& line) {
    metrics->write(line);
    tensorboard->write(line);
  }
  std::optional<StepProfiler> profiler;
  std::optional<double> peak;  // FLOP/s per rank, for MFU
  NonFiniteGuard guard;
  ThroughputWindow window;
  TrainSummary summary;
  int prefetch_depth_seen = 0;  // num_workers_dataloader as it took effect
  const Clock::time_point started = Clock::now();
  bool fp16() const { return step.loss_scaler != nullptr; }
  bool validates = false;
  double longest_step = 0, longest_save = 0;  // seconds, for the signal lead (TrainerOptions)
  bool lead_warned = false;
  // A checkpoint written in the background; last, so that it is gone (its writer joined) before
  // the optimizer state it may still be copying.
  std::unique_ptr<SaveInFlight> in_flight;
};

struct Trainer::Outcome {
  StepResult result;
  double loss_scale = 0;  // the scale the step's loss was multiplied by (fp16)
  double seconds = 0, data_wait = 0, comm_wait = 0;
  int64_t tokens = 0;  // this rank's, padding included
  std::optional<double> counted_flops;
  std::vector<int64_t> sample_ids;  // this rank's
  std::vector<int64_t> source_samples;  // several sources: the step's samples of each
  int64_t peak_rss = 0;                // the largest of any rank's, during the step
  dist::DeviceMemoryStats device_peaks;  // likewise
};

Trainer::Trainer(TrainerOptions options, dist::ProcessGroups& groups, fsdp::FsdpLlama& model, const data::Dataset& train,
                 const data::Dataset* val, CheckpointHooks hooks)
    : options_(std::move(options)),
      groups_(groups),
      model_(model),
      train_(train),
      val_(val),
      hooks_(std::move(hooks)) {}

Trainer::~Trainer() = default;

TrainSummary Trainer::run() {
  Run run(options_, groups_, train_);
  start(run);
  // What loading the weights and resuming freed stays out of the run's memory (the heap keeps
  // freed blocks for the steps: common/process_memory.h).
  common::release_freed_host_memory();
  release_kept_large_blocks();
  if (run.from.validation_pending) validate_epoch(run, run.cursor.epoch - 1);
  while (!run.schedule->finished(run.cursor) && run.summary.stop_signal == 0) train_epoch(run);
  spdlog::info("data: {}", run.prefetch_depth_seen == 0
                               ? std::string("batches collated on the training thread")
                               : fmt::format("batches collated up to {} step(s) ahead, each on its own thread",
                                             run.prefetch_depth_seen));
  run.metrics->write_recipes();
  run.metrics->close();
  run.summary.steps = run.steps_taken - run.from.step;
  run.summary.tokens_per_second =
      static_cast<double>(run.window.total_tokens() * run.ranks) / std::max(seconds_since(run.started), 1e-9);
  return run.summary;
}

void Trainer::start(Run& run) {
  const job::TrainSection& t = options_.train;
  const job::MetricsSection& m = options_.metrics;
  add_trainable_shards(model_, *run.optimizer);
  spdlog::info("optimizer: {}, {} bytes of state on this rank", run.optimizer->description(),
               run.optimizer->state_bytes());
  if (model_.options().precision.compute == at::kHalf) run.step.loss_scaler = &run.scaler;
  run.validates = t.run_validation && val_ != nullptr;
  if (hooks_.resume)
    if (std::optional<ResumePoint> r = hooks_.resume(*run.optimizer)) run.from = *r;
  run.schedule.emplace(t, run.order.epoch_size(), run.global_batch, run.from.reference_batch);
  run.cursor = run.schedule->normalized(run.from.cursor);
  run.steps_taken = run.from.step;
  run.from.validation_pending = run.from.validation_pending && run.validates;
  if (run.fp16() && run.from.loss_scale > 0) run.scaler.set_scale(run.from.loss_scale);
  if (run.from.step > 0)
    spdlog::info("resuming at step {} (epoch {}, at sample {} of its {} in the global order)", run.from.step,
                 run.cursor.epoch + 1, run.cursor.sample, run.order.epoch_size());
  spdlog::info("training: {} step(s) left of {} sample(s) x {} epoch(s), global batch {} = {} per rank x {} ranks x {} "
               "accumulation",
               run.schedule->steps_left(run.cursor), run.order.epoch_size(), t.num_epochs, run.global_batch,
               t.batch_size_training, run.ranks, run.accumulation);
  run.metrics.emplace(run.rank == 0 && m.jsonl, m.save_metrics, options_.output_dir, run.from.step,
                      run.from.validation_pending);
  run.tensorboard.emplace(run.rank == 0 && m.jsonl && m.tensorboard, options_.output_dir + "/tensorboard",
                          run.from.step, options_.output_dir + "/metrics.jsonl");
  run.peak = m.jsonl ? peak_flops(m, model_.device()) : std::nullopt;
  run.step.measure_grad_norm = true;  // the non-finite guard reads it
  run.step.before_update = [&run] {
    if (!run.in_flight) return;
    const auto start = Clock::now();
    run.in_flight->wait_for_copy();  // training stands still here too when the write is slower than a step
    run.summary.save_seconds += seconds_since(start);
  };
  run.step.model_config = &options_.model_config;
  run.step.preference = options_.preference;
  run.step.groups = &groups_;
  run.profiler.emplace(ProfilerOptions{m.use_profiler, m.profiler_dir, m.profiler_wait_steps, m.profiler_warmup_steps,
                                       m.profiler_active_steps, m.flop_counter, m.flop_counter_start + 1,
                                       model_.device().is_cuda()},
                       run.rank);
}

void Trainer::train_epoch(Run& run) {
  const int64_t epoch = run.cursor.epoch;
  const std::vector<int64_t> permutation = run.order.permutation(epoch);
  // Collating reads only the dataset and this epoch's permutation: safe on other threads.
  Prefetcher prefetch(
      [&, epoch](int64_t first) {
        std::vector<Batch> batches = step_batches(train_, run.order, permutation, run.schedule->step_at({epoch, first}),
                                                  run.accumulation, run.rank, run.ranks);
        pin_for(batches, model_.device());  // on the collating thread, off the step's path
        return batches;
      },
      static_cast<int>(options_.train.num_workers_dataloader));
  StepSpan span;
  do {
    span = run.schedule->step_at(run.cursor);
    Outcome out = take_step(run, span, permutation, prefetch);
    run.cursor = run.schedule->after(span);
    if (finish_step(run, span, out)) break;
  } while (!run.schedule->ends_epoch(span));
  run.prefetch_depth_seen = std::max(run.prefetch_depth_seen, prefetch.most_ahead());
  if (run.summary.stop_signal == 0) validate_epoch(run, epoch);
}

Trainer::Outcome Trainer::take_step(Run& run, const StepSpan& span, const std::vector<int64_t>& permutation,
                                    Prefetcher& prefetch) {
  if (options_.metrics.jsonl) {
    common::reset_peak_resident();
    dist::reset_peak_memory(model_.device());
  }
  const int64_t run_step = run.steps_taken - run.from.step + 1;  // the profiler counts this run's steps
  run.profiler->begin_step(run_step);
  // The steps whose batches may be collated ahead: the next ones of this epoch.
  std::vector<int64_t> upcoming;
  for (StepSpan next = span; static_cast<int64_t>(upcoming.size()) < options_.train.num_workers_dataloader;) {
    const Cursor c = run.schedule->after(next);
    if (c.epoch != span.epoch || run.schedule->finished(c)) break;
    next = run.schedule->step_at(c);
    upcoming.push_back(next.begin);
  }
  Outcome out;
  out.source_samples = source_counts(run.order.mixture(), permutation, span);
  out.loss_scale = run.fp16() ? run.scaler.scale() : 0.0;
  const double comm_before = model_.comm_stats().seconds;
  const auto start = Clock::now();
  {
    RECORD_USER_SCOPE(fmt::format("step {}", run.steps_taken + 1));
    std::vector<Batch> micro;
    {
      RECORD_USER_SCOPE("data.wait");
      micro = prefetch.take(span.begin, upcoming);
    }
    out.data_wait = seconds_since(start);
    run.step.lr = run.optimizer->step_size(run.schedule->lr(span));
    const int64_t every = options_.checkpoint_every_steps;
    const bool save_follows = (every > 0 && (run.steps_taken + 1) % every == 0) ||
                              run.schedule->finished(run.schedule->after(span));
    run.step.updated_piece = save_follows && hooks_.watch_update ? hooks_.watch_update(*run.optimizer) : nullptr;
    // Dropout masks follow from the seed, the step and the rank: a rerun or a resume at the same
    // world size draws the same ones.
    run.step.dropout = {true, model::mix_seed(model::mix_seed(static_cast<uint64_t>(options_.train.seed),
                                                              run.steps_taken), run.rank)};
    run.step.poison_loss = common::nonfinite_point(run.steps_taken + 1, run.rank);
    run.step.fail_group = common::group_fail_point(run.steps_taken + 1, run.rank);
    out.result = train_step(model_, *run.optimizer, micro, run.step, *groups_.world);
    out.seconds = seconds_since(start);
    if (run_step > 1) run.longest_step = std::max(run.longest_step, out.seconds);  // the first warms up
    for (const Batch& b : micro) {
      if (b.weight != 0.0) out.tokens += b.input_ids.numel();
      out.sample_ids.insert(out.sample_ids.end(), b.sample_ids.begin(), b.sample_ids.end());
    }
  }
  out.comm_wait = model_.comm_stats().seconds - comm_before;
  const job::MetricsSection& m = options_.metrics;
  out.counted_flops = counted_flops(*run.profiler, run_step, m.flop_counter && run_step == m.flop_counter_start + 1,
                                    run.steps_taken + 1, out.seconds, out.result.flops, *groups_.world);
  return out;
}

// After a step: the non-finite guard, metrics, the progress line, the checkpoint when due, and the
// stop the ranks agree on. True: the run stops here (after a checkpoint).
bool Trainer::finish_step(Run& run, const StepSpan& span, Outcome& out) {
  ++run.steps_taken;
  run.summary.losses.push_back(out.result.loss);
  try {
    run.guard.after_step(run.steps_taken, out.result);  // throws when the run must stop
  } catch (...) {
    // The save in flight holds the last checkpointed step's finite state: it is committed, on
    // every rank alike (they all see the same reduced loss), before the run stops. Dropped, a
    // diverging run with asynchronous saves would keep no checkpoint of its finite steps.
    if (run.in_flight) settle_save(run, "stopping on a non-finite step");
    throw;
  }
  common::signal_point(run.steps_taken, run.rank);
  const bool last = run.schedule->finished(run.cursor);
  AfterStep agreed;
  if (!last || options_.metrics.jsonl) agreed = agree_after_step(*groups_.world, model_.device());
  out.peak_rss = agreed.peak_rss;
  out.device_peaks = agreed.device;
  record_step(run, span, out);
  run.window.add(out.seconds, out.tokens);
  log_progress(run, span, out.result);
  const int64_t every = options_.checkpoint_every_steps;
  const bool due = (every > 0 && run.steps_taken % every == 0) || last;
  // Only a whole epoch's validation is owed to a resume: the one at the end of a run that
  // max_train_step cut mid-epoch validates what it trained so far, and the epoch goes on after it.
  const bool pending = run.validates && span.end == run.order.epoch_size();
  // A save in the background commits at the first boundary where every rank has written it; the
  // next save, a stop and the end wait for it. At most one is in flight.
  if (run.in_flight)
    settle_save(run, last                         ? "the end"
                     : agreed.stop_signal != 0    ? "stopping"
                     : due                        ? "the next save"
                                                  : nullptr);
  if (due) {
    // The last step's save, and one that a stop already asks for, are committed before going on.
    save(run, pending, !last && agreed.stop_signal == 0);
    // A signal that arrived during the save stops the ranks at this boundary, not the next.
    if (!last) agreed.stop_signal = agree_after_step(*groups_.world, model_.device()).stop_signal;
  }
  if (last || agreed.stop_signal == 0) return false;
  run.summary.stop_signal = agreed.stop_signal;
  spdlog::warn("signal {} asked the job to stop: {} after step {}", agreed.stop_signal,
               hooks_.save ? "checkpointing" : "stopping", run.steps_taken);
  if (run.in_flight) settle_save(run, "stopping");  // begun at this boundary, before the signal was known
  if (!due) save(run, pending, false);
  return true;
}

void Trainer::save(Run& run, bool validation_pending, bool background) {
  if (!hooks_.save) return;
  RECORD_USER_SCOPE("checkpoint.save");
  const bool finite = dist::min_over(*groups_.world, run.optimizer->all_finite() ? 1 : 0) == 1;
  NonFiniteGuard::before_save(run.steps_taken, finite);
  const ResumePoint at{run.steps_taken, run.cursor, run.fp16() ? run.scaler.scale() : 0.0,
                       run.schedule->reference_batch(), validation_pending};
  const auto start = Clock::now();
  if (background && hooks_.start_save) {
    run.in_flight = hooks_.start_save(*run.optimizer, at);
  } else {
    hooks_.save(*run.optimizer, at);
    run.longest_save = std::max(run.longest_save, seconds_since(start));
    check_signal_lead(run);
  }
  run.summary.save_seconds += seconds_since(start);
}

// A stop signalled signal_lead_s ahead of the time limit lets the step in progress finish, then
// saves in the foreground: both must fit, or Slurm ends the job before the checkpoint commits and
// the requeued job repeats everything since the last one.
void Trainer::check_signal_lead(Run& run) {
  run.summary.stop_needs_s = run.longest_step + run.longest_save;
  const double lead = options_.signal_lead_s;
  if (lead <= 0 || run.lead_warned || run.rank != 0 || run.summary.stop_needs_s <= lead) return;
  run.lead_warned = true;
  spdlog::warn("[slurm] signal_lead_s = {:g} s is shorter than a step ({:.1f} s, the longest so far) and a "
               "checkpoint ({:.1f} s) together: a stop ahead of the time limit may not commit its checkpoint "
               "before Slurm ends the job. HINT: set signal_lead_s to at least {:.0f}",
               lead, run.longest_step, run.longest_save, std::ceil(2 * run.summary.stop_needs_s));
}

// Commits the save in flight once every rank has written it, or, when training cannot go on
// without it (`wait_for`: what waits), after waiting for it.
void Trainer::settle_save(Run& run, const char* wait_for) {
  RECORD_USER_SCOPE("checkpoint.settle");
  const auto start = Clock::now();
  if (wait_for != nullptr || run.in_flight->written()) {
    if (wait_for != nullptr)
      spdlog::info("waiting for the checkpoint of step {}, written in the background, before {}",
                   run.in_flight->step(), wait_for);
    std::unique_ptr<SaveInFlight> save = std::move(run.in_flight);
    save->commit();
  }
  run.summary.save_seconds += seconds_since(start);
}

// The step's metrics.jsonl record (rank 0; the sample ids are gathered from every rank).
void Trainer::record_step(Run& run, const StepSpan& span, const Outcome& out) {
  const job::MetricsSection& m = options_.metrics;
  std::vector<std::vector<int64_t>> ids;
  if (m.jsonl && m.sample_ids) ids = gather_ids(*groups_.world, out.sample_ids);
  if (!run.metrics->enabled() && !run.tensorboard->enabled()) return;
  const StepResult& r = out.result;
  StepRecord record{run.steps_taken, span.epoch + 1, span.begin, span.end, r.loss, run.step.lr};
  record.preference = r.preference;
  record.grad_norm = r.grad_norm;
  if (run.fp16()) {
    record.loss_scale = out.loss_scale;
    record.skipped = r.skipped;
  }
  record.nonfinite = r.nonfinite;
  record.nonfinite_skips = run.guard.skipped();
  record.tokens = r.tokens;
  record.flops = r.flops;
  record.sample_ids = std::move(ids);
  for (size_t i = 0; i < out.source_samples.size(); ++i)
    record.sources.emplace_back(run.order.mixture().sources()[i].name, out.source_samples[i]);
  record.counted_flops = out.counted_flops;
  record.step_seconds = out.seconds;
  record.comm_wait_seconds = out.comm_wait;
  record.data_wait_seconds = out.data_wait;
  if (run.peak) record.mfu = model_flops_utilisation(r.flops, out.seconds, *run.peak, run.ranks);
  record.peak_rss_bytes = out.peak_rss;
  if (model_.device().is_cuda()) {
    record.gpu_peak_allocated_bytes = out.device_peaks.peak_allocated;
    record.gpu_peak_reserved_bytes = out.device_peaks.peak_reserved;
  }
  run.write_record(jsonl_line(record));
}

void Trainer::log_progress(Run& run, const StepSpan& span, const StepResult& result) {
  const int64_t left = run.schedule->steps_left(run.cursor);
  if (run.steps_taken % options_.metrics.log_every_steps != 0 && left > 0) return;
  const double per_step = run.window.seconds_per_step();
  const std::string dpo = result.preference ? fmt::format(" | margin {:.4f} | accuracy {:.3f}",
                                                          result.preference->rewards_margins,
                                                          result.preference->rewards_accuracies)
                                            : std::string();
  spdlog::info("step {}/{} | epoch {}/{} | loss {:.4f}{} | lr {:.3e} | {:.0f} tok/s | {:.3f} s/step | ETA {}",
               run.steps_taken, run.steps_taken + left, span.epoch + 1, options_.train.num_epochs, result.loss, dpo,
               run.step.lr,
               run.window.tokens_per_second(run.ranks), per_step, duration_text(per_step * static_cast<double>(left)));
  run.window.reset();
}

void Trainer::validate_epoch(Run& run, int64_t epoch) {
  if (!run.validates) return;
  Evaluation v;
  std::vector<EvalRecord::Source> parts;
  {
    RECORD_USER_SCOPE("validation");
    const job::TrainSection& t = options_.train;
    if (options_.val_sources.size() < 2) {
      v = evaluate(model_, *val_, t.val_batch_size, t.max_eval_step, *groups_.world, options_.preference);
    } else {
      // Each source's part on its own; the whole as their sum (a mean over all their tokens, or
      // over all their pairs for DPO).
      std::vector<Evaluation> each;
      for (const data::MixtureSource& s : options_.val_sources) {
        const data::DatasetSlice part(*val_, s.offset, s.size);
        each.push_back(evaluate(model_, part, t.val_batch_size, t.max_eval_step, *groups_.world, options_.preference));
        parts.push_back({s.name, each.back().loss, each.back().rows, each.back().tokens});
        spdlog::info("epoch {} validation of source \"{}\": loss {:.4f} ({} row(s), {} learned token(s))", epoch + 1,
                     s.name, each.back().loss, each.back().rows, each.back().tokens);
      }
      v = combine(each);
    }
  }
  run.summary.last_val_loss = v.loss;
  run.write_record(
      jsonl_line(EvalRecord{epoch + 1, run.steps_taken, v.loss, v.batches, v.rows, v.tokens, v.preference, parts}));
  run.metrics->write_recipes();
  if (v.preference) {
    spdlog::info("epoch {} validation: DPO loss {:.4f}, reward margin {:.4f}, accuracy {:.3f} ({} batch(es) of {} "
                 "pair(s) per rank: {} of {} pair(s))",
                 epoch + 1, v.loss, v.preference->rewards_margins, v.preference->rewards_accuracies, v.batches,
                 options_.train.val_batch_size, v.rows, val_->size());
    return;
  }
  spdlog::info("epoch {} validation: loss {:.4f}, perplexity {:.3f} ({} batch(es) of {} row(s) per rank{}: {} of {} "
               "row(s), {} learned token(s))",
               epoch + 1, v.loss, std::exp(v.loss), v.batches, options_.train.val_batch_size,
               options_.train.max_eval_step > 0 ? fmt::format(", max_eval_step = {}", options_.train.max_eval_step) : "",
               v.rows, val_->size(), v.tokens);
}

}  // namespace shardtune::train
