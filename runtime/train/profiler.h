// LibTorch's profiler over training steps, on a wait / warmup / active schedule (as
// torch.profiler.schedule with repeat = 1): steps 1..wait run unprofiled, the next `warmup` run
// profiled with their events discarded, the next `active` are kept, and each rank then writes a
// Chrome trace (rank-NNNNN.trace.json, which Perfetto and chrome://tracing open) with LibTorch's
// operators and shardtune's named ranges: fsdp.forward / fsdp.backward per unit, fsdp.all_gather.*
// and fsdp.reduce_scatter.* per unit, optimizer.step, data.wait, checkpoint.save.
//
// The FLOP counter (llama-recipes' flop_counter) profiles one step with FLOP counting and
// returns the FLOPs of its matrix products (aten::mm, addmm, bmm, baddbmm), measured from the
// shapes LibTorch actually multiplied.
//
// Steps are counted from the first step of this run (1-based), so a resumed run profiles too.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace shardtune::train {

struct ProfilerOptions {
  bool trace = false;
  std::string dir;  // where rank-NNNNN.trace.json go
  int64_t wait = 1, warmup = 2, active = 3;
  bool flop_counter = false;
  int64_t flop_step = 4;  // the step of this run whose FLOPs are counted
  bool cuda = false;      // also record GPU kernels (a LibTorch with Kineto: the CUDA builds)
};

class StepProfiler {
 public:
  StepProfiler(ProfilerOptions options, int rank);
  ~StepProfiler();  // a trace still recording (the run ended inside the window) is written
  StepProfiler(const StepProfiler&) = delete;
  StepProfiler& operator=(const StepProfiler&) = delete;

  // Neither ever throws: a failure (a trace that cannot be written) is logged once as a warning
  // and turns the profiler off; training goes on.
  void begin_step(int64_t n);
  // The matrix-product FLOPs of this rank in step n when n is the flop counter's step.
  std::optional<double> end_step(int64_t n);

  // Where this rank's trace was written; empty until it has been.
  const std::string& trace_path() const { return written_; }

 private:
  void start(bool with_flops);
  void write_trace();
  void give_up(const std::string& why);

  ProfilerOptions options_;
  int rank_;
  bool recording_ = false;
  std::string written_;
};

}  // namespace shardtune::train
