// Will the job fit? The memory one rank needs while training, part by part, worked out from the
// job and the model's shapes as shardtune's FSDP holds them:
//   - parameter shards (the master dtype; a LoRA base in the compute dtype), gradient shards and
//     AdamW's two moments, for the trainable parameters only;
//   - the gathered units in the compute dtype: the unit computing and the one prefetched
//     (FULL_SHARD, HYBRID_SHARD), every unit (SHARD_GRAD_OP, NO_SHARD with mixed precision);
//   - unsharded gradient buffers of the units whose reduction is in flight;
//   - activations of a micro-batch: every block's saved tensors, or only the blocks' inputs and one
//     block recomputed (activation checkpointing), and the logits with their loss and gradient;
//   - the runtime itself (LibTorch, MPI, HDF5 on the CPU); on a GPU, NCCL's buffers, and on rank 0
//     the unit a full checkpoint gathers;
//   - with [checkpoint] async on a GPU, the pinned host copy of the rank's saved state (apart);
//   - with [fsdp] cpu_offload on a GPU, the shards, gradients and optimizer state it keeps in host
//     memory instead (apart).
// On the CPU the parts are host memory (what peak RSS measures); on a GPU, device memory (what
// the CUDA caching allocator holds; the CUDA context comes on top).
#pragma once

#include <string>
#include <vector>

#include "common/job/job.h"
#include "runtime/model/llama_config.h"

namespace shardtune::launcher {

struct MemoryPart {
  std::string name;    // "parameters"
  std::string detail;  // "sharded over 4 ranks, fp32"
  double bytes = 0;
};

struct MemoryPlan {
  bool cuda = false;                // device memory of a GPU; else host memory of a CPU rank
  std::vector<MemoryPart> parts;    // at the training peak (the end of the forward pass)
  double total_bytes = 0;
  double loading_bytes = 0;         // host memory per rank while the weights are loaded
  std::string loading_detail;
  // What a rank's checkpoint holds (its shards and, saved with the optimizer, moments). With
  // [checkpoint] async on a GPU, the host memory (pinned) that holds a copy of it while it is
  // written in the background, kept for the next save: checkpoint_copy_bytes. On the CPU the shards
  // are written as they are (no copy).
  double checkpoint_state_bytes = 0;
  double checkpoint_copy_bytes = 0;
  // [fsdp] cpu_offload on a GPU: the host memory per rank (pinned) that holds the trainable shards,
  // their gradients and the optimizer's state (with offload_params the frozen shards too), which
  // the GPU's parts then leave out. On the CPU, host memory is the device's and nothing moves.
  double offload_bytes = 0;
  double parameters = 0, trainable = 0;  // counts
  int64_t world = 1, shard_size = 1, ranks_per_node = 1;
  int64_t tokens_per_micro_batch = 0;
};

MemoryPlan plan_memory(const job::Job& job, const model::LlamaConfig& config);

// The model a job trains, as its ranks build it (model::job_model_config, with the job's tokenizer).
model::LlamaConfig job_model_config(const job::Job& job);

}  // namespace shardtune::launcher
