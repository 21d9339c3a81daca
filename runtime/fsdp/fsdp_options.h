// What FSDP does with a job's [train] and [fsdp] settings: the shard-group size, when gathered
// parameters are freed, and the dtypes of master weights, compute and gradient reduction.
#pragma once

#include <ATen/core/Tensor.h>

#include <optional>
#include <string>

#include "common/job/job.h"
#include "runtime/quant/nf4.h"

namespace shardtune::fsdp {

struct PrecisionPolicy {
  at::ScalarType master = at::kFloat;   // sharded parameters and optimizer state
  at::ScalarType compute = at::kFloat;  // gathered parameters, activations, local gradients
  at::ScalarType reduce = at::kFloat;   // gradients on the wire
  // Shards of frozen parameters (they have no optimizer state). LoRA keeps its frozen base in the
  // compute dtype: a bf16 shard and no fp32 master, which its forward would round to bf16 anyway.
  at::ScalarType frozen = at::kFloat;
};

struct FsdpOptions {
  at::Device device = at::kCPU;        // where shards, gradients, optimizer state and activations live
  int shard_size = 1;                  // ranks that shard each unit among them
  bool reshard_after_forward = true;   // FULL_SHARD, HYBRID_SHARD: gather again for backward
  bool reshard_after_backward = true;  // all but NO_SHARD
  bool activation_checkpointing = false;
  // With activation_checkpointing: the model's last this many blocks keep their activations. Their
  // backward runs first and frees them, so they are never held together with a recomputed block's.
  int64_t uncheckpointed_blocks = 0;
  // Start the next unit's all-gather while this one computes (forward and backward), and let a
  // unit's gradient reduction run while earlier units compute their backward. Off: every
  // collective completes before the computation that follows it (for tests and benchmarks).
  bool overlap = true;
  PrecisionPolicy precision;
  // QLoRA: the frozen projections of every block (q, k, v, o, gate, up, down; bitsandbytes leaves
  // embeddings, norms and the head as they are) are stored in NF4 records of this format.
  std::optional<quant::Nf4Format> nf4_base;
  // Trainable parameters start at multiples of this many elements in their flat parameter, and
  // shard boundaries fall on multiples of it: an 8-bit optimizer's blocks of each tensor then lie
  // in one shard whatever the world size (runtime/fsdp/adam8bit.h).
  int64_t trainable_align = 1;
  // [fsdp] cpu_offload: the trainable shards (the masters), their gradients and so the optimizer's
  // state live in host memory (pinned when `device` is a GPU) and the optimizer steps there, as
  // FSDP's CPUOffload and ZeRO-Offload do; gathers copy a shard up, reductions copy the gradient
  // down. offload_params: the frozen shards too (a LoRA or QLoRA base). On the CPU the same path
  // runs with host copies.
  bool cpu_offload = false;
  bool offload_params = false;
};


// llama-recipes' semantics: mixed_precision computes in bf16 (fp16 with use_fp16) over fp32
// masters; pure_bf16 keeps masters in bf16 too; reduce_dtype picks the gradient wire type.
// Frozen shards: like masters, or in the compute dtype with `lora`.
PrecisionPolicy precision_from_job(const job::TrainSection& train, const job::FsdpSection& fsdp, bool lora = false);

// From the [fsdp] section and the precision keys of [train]. world_size: the ranks actually
// running; ranks_per_node: the HSDP shard group when hsdp_shard_size is 0; device: where this
// rank trains; lora: [peft] method = "lora" (the frozen base is kept in the compute dtype).
FsdpOptions fsdp_options(const job::FsdpSection& fsdp, const job::TrainSection& train, int world_size,
                         int ranks_per_node, at::Device device = at::kCPU, bool lora = false);

}  // namespace shardtune::fsdp
