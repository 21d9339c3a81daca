// Checksums of a rank's saved state taken while the optimizer writes it. A sharded save writes
// each fp32 shard and moment in place and needs its slices' block CRC-32s (block_crc.h); taken in
// the background, that pass reads the whole state from memory again (0.7 GB a rank for a 0.12B
// model with AdamW), beside training. Taken during the update of the step a save follows, each
// piece is summed right after AdamW wrote it (AdamW::PieceObserver), from cache.
//
// A checksum is used only for the tensor it was taken of (same memory, same size) while that
// tensor's version counter still says what it said at the end of the update: any in-place change
// since (a load, a copy) makes the writer compute it again.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

#include "checkpoint/block_crc.h"
#include "checkpoint/full_file.h"
#include "runtime/fsdp/optimizer.h"
#include "runtime/fsdp/fsdp_llama.h"

namespace shardtune::checkpoint {

class UpdateCrcs {
 public:
  // Forgets what was taken and returns the observer for the next AdamW::step of `optimizer`, which
  // trains the trainable flat parameters of `model` in order (train::add_trainable_shards): the
  // observer sums the slices a save writes of each one's shard and moments (state_of).
  fsdp::Optimizer::PieceObserver watch(fsdp::FsdpLlama& model, fsdp::Optimizer& optimizer);

  // For each unit of `units` without checksums: those taken of its tensor in its present version.
  // Returns how many units got them (also kept: used()).
  size_t fill(std::vector<FullUnit>& units);
  size_t used() const { return used_; }

  // Tensors whose checksums the last update watched completed.
  size_t complete() const;
  // Seconds the observer took during the last update watched: the save's checksum pass, moved there.
  double seconds() const { return seconds_; }

 private:
  struct Tensor {
    std::string kind;
    at::Tensor tensor;                          // the shard or moment, flat fp32 on the host
    std::vector<std::pair<int64_t, int64_t>> slices;  // [begin, end) in the tensor, in order
    std::vector<BlockCrc> sums;                 // one per slice
    std::vector<std::vector<uint32_t>> crcs;    // when complete
    int64_t fed = 0;                            // elements seen
    size_t next = 0;                            // the first slice not yet summed whole
    int64_t version = -1;                       // at completion; -1 until then
    void feed(int64_t start, int64_t count);
  };
  std::vector<std::vector<Tensor>> by_param_;  // per optimizer parameter
  double seconds_ = 0;
  size_t used_ = 0;
};

}  // namespace shardtune::checkpoint
