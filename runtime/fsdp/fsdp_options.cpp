// Job settings → FSDP behaviour.
#include "runtime/fsdp/fsdp_options.h"

namespace shardtune::fsdp {

PrecisionPolicy precision_from_job(const job::TrainSection& train, const job::FsdpSection& fsdp, bool lora) {
  PrecisionPolicy p;
  const at::ScalarType wire = fsdp.reduce_dtype == common::Dtype::kBF16 ? at::kBFloat16 : at::kFloat;
  if (train.pure_bf16) {
    p = {at::kBFloat16, at::kBFloat16, wire, at::kBFloat16};
  } else if (train.mixed_precision) {
    p = {at::kFloat, train.use_fp16 ? at::kHalf : at::kBFloat16, wire, at::kFloat};
  }
  p.frozen = lora ? p.compute : p.master;
  return p;
}

FsdpOptions fsdp_options(const job::FsdpSection& fsdp, const job::TrainSection& train, int world_size,
                         int ranks_per_node, at::Device device, bool lora) {
  FsdpOptions o;
  o.device = device;
  o.precision = precision_from_job(train, fsdp, lora);
  o.activation_checkpointing = fsdp.activation_checkpointing;
  o.shard_size = static_cast<int>(job::shard_group_size(fsdp, world_size, ranks_per_node));
  o.reshard_after_forward = fsdp.sharding_strategy == job::ShardingStrategy::kFullShard ||
                            fsdp.sharding_strategy == job::ShardingStrategy::kHybridShard;
  o.reshard_after_backward = fsdp.sharding_strategy != job::ShardingStrategy::kNoShard;
  return o;
}

}  // namespace shardtune::fsdp
