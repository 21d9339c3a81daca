// Building and loading the sharded model.
#include "rank/sharded_model.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <optional>
#include <set>
#include <vector>

#include "common/error.h"
#include "common/job/schema.h"

#include "checkpoint/hf/hf_tensor_source.h"
#include "checkpoint/hf/weights_digest.h"
#include "rank/job_model.h"
#include "runtime/model/job_model_config.h"
#include "runtime/fsdp/shard_loader.h"

namespace shardtune::rank_program {
namespace {

void log_model(const job::Job& job, const ShardedModel& m, const std::set<std::string>& frozen,
               const fsdp::FsdpOptions& options) {
  // From the flat parameters' layouts: the model's own tensors are views of freed storage by now.
  int64_t trainable = 0;
  for (fsdp::FlatParam* f : m.sharded->flat_params())
    if (f->trainable()) trainable += f->layout().numel();
  const bool lora = job.peft.adapters();
  spdlog::info("model: {:.1f}M parameters, {} trainable ({} frozen tensors{}), {} units; {} bytes of shards per rank",
               static_cast<double>(m.model->config().num_parameters()) / 1e6, trainable, frozen.size(),
               lora ? fmt::format(", {} r = {} on {}", job.peft.method == job::PeftMethod::kQlora ? "QLoRA" : "LoRA",
                                  job.peft.lora_r, fmt::join(job.peft.target_modules, ", "))
                    : "",
               m.model->num_layers() + 2, m.sharded->persistent_bytes());
  if (options.cpu_offload) {
    int64_t host = 0;
    for (fsdp::FlatParam* f : m.sharded->flat_params())
      if (f->offloaded()) host += f->shard().nbytes() + (f->trainable() ? f->shard().nbytes() : 0);
    spdlog::info("cpu offload: {} shards in host memory{}, {} bytes with their gradients; the optimizer steps on the "
                 "host",
                 options.offload_params ? "all" : "the trainable", options.device.is_cuda() ? " (pinned)" : "", host);
  }
  if (options.nf4_base) {
    int64_t packed = 0, weights = 0;
    for (fsdp::FlatParam* f : m.sharded->flat_params())
      if (f->nf4()) {
        packed += f->shard().nbytes();
        weights += f->layout().numel();
      }
    spdlog::info("QLoRA: {} block projections' weights in NF4 (blocks of {}, scales {}), {} bytes of records on this "
                 "rank; embeddings, norms and the head in {}",
                 weights, options.nf4_base->block_size,
                 options.nf4_base->double_quant ? "double-quantised" : "in fp32", packed,
                 c10::toString(options.precision.frozen));
  }
  const fsdp::PrecisionPolicy& p = options.precision;
  const int64_t layers = m.model->num_layers();
  const int64_t kept = std::min(options.uncheckpointed_blocks, layers);
  std::string checkpointing = options.activation_checkpointing ? "on" : "off";
  if (options.activation_checkpointing && kept == layers)
    checkpointing = fmt::format("on for no block: all {} keep their activations (uncheckpointed_blocks)", layers);
  else if (options.activation_checkpointing && kept > 0)
    checkpointing = fmt::format("on for blocks 0-{} of {}, the last {} keeping their activations", layers - kept - 1,
                                layers, kept);
  spdlog::info("precision: parameters {}, compute {}, gradients reduced in {}{}; activation checkpointing {}; "
               "gradient clipping {}",
               c10::toString(p.master), c10::toString(p.compute), c10::toString(p.reduce),
               p.compute == at::kHalf ? " with a dynamic loss scaler" : "", checkpointing,
               job.train.gradient_clipping ? fmt::format("at a global norm of {}", job.train.gradient_clipping_threshold)
                                           : std::string("off"));
}

}  // namespace

namespace {

// The job's model sharded, or (`frozen_copy`) DPO's reference: no adapters, every parameter frozen in
// the compute dtype, no identity digested.
ShardedModel build(const job::Job& job, const model::LlamaConfig& config, const dist::Topology& topo,
                   dist::ProcessGroups& groups, const at::Device& device, bool read_base, bool frozen_copy) {
  const bool lora = job.peft.adapters();
  // Not reading the base: built without weights as a streamed model is, then left unloaded.
  const bool stream = model::streams_weights(job, config) || !read_base;
  // The base's identity: each rank that reads weights hashes what it reads (world rank 0 alone,
  // when every rank builds the whole model), and world rank 0 merges the digests.
  const bool identify = !frozen_copy && lora && job.model.init == job::ModelInit::kPretrained && !job.model.path.empty();
  std::optional<checkpoint::WeightsDigest> digest;
  if (identify && !stream && topo.rank == 0) digest.emplace(checkpoint::HfFolder::open(job.model.path));
  ShardedModel m;
  m.model = stream ? std::make_unique<model::LlamaForCausalLM>(config, at::TensorOptions().device(at::kMeta))
                   : build_model(job, config, digest ? &*digest : nullptr);
  if (!frozen_copy) add_job_adapters(job, *m.model);
  const fsdp::SourceFactory source = [&]() -> std::unique_ptr<fsdp::TensorSource> {
    std::unique_ptr<fsdp::TensorSource> s = checkpoint::HfFolderSourceFactory{job.model.path}();
    if (!identify) return s;
    if (!digest) digest.emplace(checkpoint::HfFolder::open(job.model.path));
    return checkpoint::digesting_source(std::move(s), *digest);
  };
  fsdp::FsdpOptions options = fsdp::fsdp_options(job.fsdp, job.train, topo.world_size, topo.local_size, device, lora);
  if (frozen_copy) options.precision.frozen = options.precision.compute;  // a forward casts it so anyway
  if (job.peft.method == job::PeftMethod::kQlora)
    options.nf4_base = quant::Nf4Format{job.peft.nf4_block_size, job.peft.nf4_double_quant};
  if (stream && read_base) fsdp::validate_source(*m.model, source, *groups.world, options.nf4_base);
  std::set<std::string> frozen;
  if (frozen_copy)
    for (const model::NamedParam& p : m.model->named_parameters()) frozen.insert(p.name);
  else
    frozen = frozen_parameters(job, *m.model);
  m.sharded = std::make_unique<fsdp::FsdpLlama>(*m.model, groups, options, frozen);
  double seconds = 0;
  if (!read_base) {
    spdlog::info("the base weights are not read: the checkpoint to resume holds every weight");
  } else if (stream) {
    fsdp::LoadOptions load_options;
    load_options.reader_per_node = job.fsdp.load_readers == job::LoadReaders::kNode;
    if (identify) load_options.granule_bytes = static_cast<int64_t>(checkpoint::WeightsDigest::kChunkBytes);
    const fsdp::LoadStats load = fsdp::load_shards(*m.sharded, source, load_options);
    seconds = load.seconds;
    spdlog::info("streamed the weights into shards in {:.1f} s, read by {}{}", load.seconds,
                 job.fsdp.load_readers == job::LoadReaders::kNode ? "one rank per node" : "world rank 0 for every rank",
                 load.reader ? fmt::format(" ({:.2f} GB by this rank)", static_cast<double>(load.bytes_read) / 1e9)
                             : "");
  }
  if (identify) {
    const std::optional<checkpoint::HfFolder> folder =
        topo.rank == 0 ? std::optional(checkpoint::HfFolder::open(job.model.path)) : std::nullopt;
    m.weights_sha256 = checkpoint::merged_digest(digest ? &*digest : nullptr, folder ? &*folder : nullptr, *groups.world);
    if (digest)
      spdlog::info("base model identity: SHA-256 of every weight byte this rank read, {:.2f} s of hashing{}",
                   digest->seconds(),
                   seconds > 0 ? fmt::format(" within the {:.2f} s load ({:.0f}%)", seconds,
                                             100.0 * digest->seconds() / seconds)
                               : "");
  }
  if (!frozen_copy) {
    log_model(job, m, frozen, options);
  } else {
    spdlog::info("DPO reference: a frozen copy of {}, {} bytes of shards per rank in {}{}",
                 job.model.path.empty() ? fmt::format("the {} preset's initial weights", job::enum_name(job.model.preset))
                                        : job.model.path,
                 m.sharded->persistent_bytes(), c10::toString(options.precision.frozen),
                 options.nf4_base ? " (block projections in NF4)" : "");
  }
  return m;
}

}  // namespace

ShardedModel build_sharded_model(const job::Job& job, const model::LlamaConfig& config, const dist::Topology& topo,
                                 dist::ProcessGroups& groups, const at::Device& device, bool read_base) {
  return build(job, config, topo, groups, device, read_base, false);
}

ShardedModel build_reference_model(const job::Job& job, const model::LlamaConfig& config, const dist::Topology& topo,
                                   dist::ProcessGroups& groups, const at::Device& device) {
  job::Job ref = job;
  if (!job.dpo.reference_model.empty()) {
    ref.model = {job.dpo.reference_model, job::ModelPreset::kNone, job::ModelInit::kPretrained};
    const std::string differs =
        model::LlamaConfig::from_file(ref.model.path + "/config.json").shape_difference(config);
    ST_CHECK(differs.empty(), common::ErrorKind::kConfig,
             "[dpo] reference_model = \"{}\" is not of the policy's shape: {}", ref.model.path, differs);
  }
  return build(ref, config, topo, groups, device, true, true);
}

}  // namespace shardtune::rank_program
