// The records of metrics.jsonl, one JSON object per line (docs/metrics.md describes every field):
// a training record per optimizer step and an evaluation record per validation. The fields that
// are the same in two identical runs (step, losses, learning rate, gradient norm, loss scale,
// token and FLOP counts) come before "step_seconds"; the timings and memory figures come after it.
// Also MFU (torchtitan's FLOP estimate over a peak) and the table of GPU peaks it uses.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "runtime/train/preference_metrics.h"

namespace shardtune::train {

struct StepRecord {
  int64_t step = 0;   // optimizer steps taken, counting this one
  int64_t epoch = 0;  // 1-based
  int64_t sample_begin = 0, sample_end = 0;  // the step's slice of the epoch's global sample order
  double loss = 0;                           // mean over the global batch
  double lr = 0;
  std::optional<double> grad_norm{};   // global norm of the gradients, before clipping
  std::optional<double> loss_scale{};  // fp16 only: the scale this step's loss was multiplied by
  bool skipped = false;              // fp16 only: the gradients overflowed and no update was made
  bool nonfinite = false;            // the loss or gradient norm was not finite: no update was made
  int64_t nonfinite_skips = 0;       // non-finite steps so far in this run ([train] on_nonfinite)
  int64_t tokens = 0;                // tokens of the global batch, padding included
  double flops = 0;                  // training FLOPs of the global batch (training_flops_per_token)
  // [metrics] sample_ids: the dataset indices each rank trained in this step, in rank order.
  std::vector<std::vector<int64_t>> sample_ids{};
  double step_seconds = 0;           // rank 0: from asking for the step's batches to the step's loss
  double comm_wait_seconds = 0;      // rank 0's host time in FSDP's collectives within the step
  double data_wait_seconds = 0;      // rank 0's wait for the step's batches
  std::optional<double> mfu{};         // model FLOPs utilisation; absent without a known peak
  std::optional<double> counted_flops{};  // the flop counter's step only: FLOPs LibTorch multiplied
  int64_t peak_rss_bytes = 0;        // the largest peak resident memory of any rank during the step
  std::optional<int64_t> gpu_peak_allocated_bytes{};  // CUDA only: the largest of any rank's allocator peak
  std::optional<int64_t> gpu_peak_reserved_bytes{};
  std::optional<PreferenceMetrics> preference{};  // DPO: rewards/chosen, ... over the global batch's pairs
  // Several data sources: the samples of each in the step, by name (written before step_seconds).
  std::vector<std::pair<std::string, int64_t>> sources{};
};

struct EvalRecord {
  int64_t epoch = 0;       // the epoch this validation ended
  int64_t after_step = 0;  // optimizer steps taken before it
  double loss = 0;         // mean validation loss over every learned token of every row evaluated
  int64_t batches = 0;     // global batches (val_batch_size rows per rank)
  int64_t rows = 0;        // rows evaluated, over every rank
  int64_t tokens = 0;      // learned tokens in them
  std::optional<PreferenceMetrics> preference{};  // DPO: loss is the pairs' mean DPO loss, rows counts pairs
  // Several data sources with validation parts: each part's own evaluation (its rows, tokens and
  // loss), by name; the record's own figures are over all of them.
  struct Source {
    std::string name;
    double loss = 0;
    int64_t rows = 0, tokens = 0;
  };
  std::vector<Source> sources{};
};

// One line of metrics.jsonl (ending in '\n'). A loss that is not finite is written as null.
std::string jsonl_line(const StepRecord& r);
std::string jsonl_line(const EvalRecord& r);

// Dense bf16 peak FLOP/s of a GPU by the name CUDA reports (e.g. "NVIDIA H100 80GB HBM3"), from
// its vendor's data sheet; nullopt for a device the table does not know.
std::optional<double> gpu_bf16_peak_flops(std::string_view device_name);

// Achieved FLOP/s over the peak of all ranks together.
double model_flops_utilisation(double flops, double seconds, double peak_flops_per_rank, int ranks);

}  // namespace shardtune::train
