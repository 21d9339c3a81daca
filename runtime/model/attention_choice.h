// Which kernel causal attention takes on a GPU, shape by shape: PyTorch's choice with cuDNN's
// attention left out (flash attention for bf16 and fp16), or allowed. cuDNN's was the faster at
// Llama 3.2 1B's shapes on an H200 (docs/gpu-2026-11-29.md), but it builds a plan for every shape
// it meets and keeps it per thread without bound, where a job's lengths may change from batch to
// batch (padded batches, packed rows attending per document); flash attention serves any length.
// So each shape is timed both ways the first time it is met (runtime/model/attention.cpp), and
// only the first kMaxShapes shapes are: every later one leaves cuDNN out, so that cuDNN never
// holds plans for more shapes than that. No ATen here: the policy is tested on its own.
#pragma once

#include <cstddef>
#include <functional>
#include <map>
#include <mutex>
#include <string>

namespace shardtune::model {

class AttentionChoice {
 public:
  static constexpr size_t kMaxShapes = 8;
  // Seconds of one forward and backward of a call each way.
  struct Timing {
    double without_cudnn = 0, with_cudnn = 0;
  };

  // Whether calls of `shape` (a description of the call's sizes, dtype and device) take cuDNN: as
  // chosen the first time, when `measure` runs (once per shape, while fewer than kMaxShapes have
  // been chosen; false, unmeasured, after that). Strictly faster to take it; logged once.
  bool use_cudnn(const std::string& shape, const std::function<Timing()>& measure);

  // The shapes chosen so far, and which took cuDNN.
  std::map<std::string, bool> choices() const;

 private:
  mutable std::mutex mutex_;
  std::map<std::string, bool> choices_;
  bool told_full_ = false;
};

// The process's choices (causal_attention's).
AttentionChoice& attention_choice();

}  // namespace shardtune::model
