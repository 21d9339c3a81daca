// Samples into the tensors of a step: a micro-batch of samples padded to its longest, and a rank's
// micro-batches of one step of the global order (data_order.h), with their loss weights.
#pragma once

#include <c10/core/Device.h>

#include <cstdint>
#include <vector>

#include "runtime/train/batch.h"
#include "runtime/train/data_order.h"
#include "runtime/data/dataset.h"
#include "runtime/train/run_schedule.h"

namespace shardtune::train {

// The samples as one micro-batch; shorter samples are padded at the end to the longest (pad id,
// label -100): a causal model never lets real tokens see the padding after them.
// Preference pairs (data::Sample::is_pair) become 2 x their count rows, every chosen sequence first
// (Batch::pairs).
Batch collate(const data::Dataset& data, const std::vector<int64_t>& indices);
// The same for samples already read (`indices` name them in messages; may be empty).
Batch collate_samples(const data::Dataset& data, const std::vector<data::Sample>& samples,
                      const std::vector<int64_t>& indices);

// This rank's micro-batches of step `span`, whose sample order is `permutation`. A micro-batch slot
// without samples (a short step over many slots) holds the step's first sample with weight 0.
std::vector<Batch> step_batches(const data::Dataset& data, const DataOrder& order, const std::vector<int64_t>& permutation,
                                const StepSpan& span, int accumulation, int rank, int ranks);

// For a rank on a GPU: the batches' tensors in page-locked host memory, so that their copy to the
// device at the model's input is asynchronous (from pageable memory it is staged while the host
// waits). Unchanged for a CPU device.
void pin_for(std::vector<Batch>& batches, const c10::Device& device);

}  // namespace shardtune::train
