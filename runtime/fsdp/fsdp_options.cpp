// Job settings → FSDP behaviour.
#include "runtime/fsdp/fsdp_options.h"

#include "runtime/fsdp/adam8bit.h"

namespace shardtune::fsdp {

namespace {

at::ScalarType scalar_type(common::Dtype d) {
  switch (d) {
    case common::Dtype::kBF16: return at::kBFloat16;
    case common::Dtype::kF16: return at::kHalf;
    default: return at::kFloat;
  }
}

}  // namespace

PrecisionPolicy precision_from_job(const job::TrainSection& train, const job::FsdpSection& fsdp, bool lora) {
  const job::Precision p = job::precision(train, fsdp, lora);
  return {scalar_type(p.master), scalar_type(p.compute), scalar_type(p.reduce), scalar_type(p.frozen)};
}

FsdpOptions fsdp_options(const job::FsdpSection& fsdp, const job::TrainSection& train, int world_size,
                         int ranks_per_node, at::Device device, bool lora) {
  FsdpOptions o;
  o.device = device;
  o.precision = precision_from_job(train, fsdp, lora);
  o.activation_checkpointing = fsdp.activation_checkpointing;
  o.uncheckpointed_blocks = fsdp.uncheckpointed_blocks;
  o.shard_size = static_cast<int>(job::shard_group_size(fsdp, world_size, ranks_per_node));
  o.reshard_after_forward = fsdp.sharding_strategy == job::ShardingStrategy::kFullShard ||
                            fsdp.sharding_strategy == job::ShardingStrategy::kHybridShard;
  o.reshard_after_backward = fsdp.sharding_strategy != job::ShardingStrategy::kNoShard;
  if (train.optimizer == job::Optimizer::kAdamW8bit) o.trainable_align = kAdam8bitBlock;
  o.cpu_offload = fsdp.cpu_offload;
  o.offload_params = fsdp.offload_params;
  return o;
}

}  // namespace shardtune::fsdp
