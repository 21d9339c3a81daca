// The job's model, sharded: either every rank builds the whole model and keeps its shards, or the
// model is built without weights and each rank receives only its shards from the readers
// (streams_weights). With LoRA on a pretrained base, every rank that reads weights digests the bytes
// it reads, and world rank 0 merges the digests: the base identity its adapter checkpoints record
// (checkpoint/hf/weights_digest.h).
#pragma once

#include <memory>
#include <string>

#include "common/job/job.h"
#include "runtime/dist/process_groups.h"
#include "runtime/dist/topology.h"
#include "runtime/fsdp/fsdp_llama.h"
#include "runtime/model/llama.h"

namespace shardtune::rank_program {

struct ShardedModel {
  std::unique_ptr<model::LlamaForCausalLM> model;  // its parameters released into the shards
  std::unique_ptr<fsdp::FsdpLlama> sharded;
  std::string weights_sha256;  // a LoRA job on a pretrained base (every rank); empty for others
};

// Collective over the groups' world.
// `read_base` false: the shards are left as allocated (a resume overwrites every one of them) and
// the base model's weights are not read at all.
ShardedModel build_sharded_model(const job::Job& job, const model::LlamaConfig& config, const dist::Topology& topo,
                                 dist::ProcessGroups& groups, const at::Device& device, bool read_base = true);

// DPO's reference = "model": a frozen copy of the starting weights ([dpo] reference_model, else the
// job's own model), sharded as the policy is, every parameter frozen (no gradient, no optimizer
// state) and held in the compute dtype (NF4 for QLoRA's block projections), without adapters.
// Throws common::Error(kConfig) when the reference's shapes are not the policy's. Collective.
ShardedModel build_reference_model(const job::Job& job, const model::LlamaConfig& config, const dist::Topology& topo,
                                   dist::ProcessGroups& groups, const at::Device& device);

}  // namespace shardtune::rank_program
