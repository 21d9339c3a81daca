// Checkpoints of FSDP training. Sharded: every rank writes the slices of parameters (and AdamW
// moments) its shards hold into its own HDF5 file, replicas of a shard (HSDP) a part of it each;
// the manifest (checkpoint/manifest.h)
// records each slice's tensor, global element offset, length and block checksums. Loading at any
// world size or strategy is a different selection of the same slices. Full: one file, model.h5,
// holding every tensor whole, written by world rank 0 unit by unit. Both are committed by
// checkpoint/commit.h and load the same way. Every collective runs through the process groups'
// communicators, so a rank that stops answering (stuck in I/O, dead) fails the others by name
// instead of hanging them.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "checkpoint/manifest.h"
#include "runtime/dist/process_groups.h"
#include "runtime/fsdp/optimizer.h"
#include "runtime/fsdp/fsdp_llama.h"

namespace shardtune::checkpoint {

class UpdateCrcs;  // update_crcs.h

struct TrainingState {
  int64_t step = 0;             // optimizer steps taken
  int64_t epoch = 0;            // the epoch the next step belongs to
  int64_t sample_in_epoch = 0;  // samples of that epoch's global order already trained on
  double loss_scale = 0;        // fp16 loss scale (0 when unused)
  int64_t reference_batch = 0;  // the global batch the job's step-counted keys mean
  bool validation_pending = false;  // the epoch ending at the cursor still needs its validation
  std::string job_toml;         // the resolved job that wrote it
  std::string model_config;     // the model's config.json, so the checkpoint converts to HF alone
  // LoRA: the checkpoint holds only the trainable flat parameters (the adapters), and records this.
  std::optional<AdapterRecord> adapter{};
  data::DataIdentity data{};  // what the run trained on (manifest.h); empty when not recorded
  // On a load with the optimizer: tensors that train now but were frozen when the checkpoint was
  // saved (their moments and their AdamW step start at zero), and tensors frozen now whose saved
  // moments are not used.
  std::vector<std::string> fresh_moments, unused_moments;
  bool has_optimizer = false;  // the checkpoint holds AdamW's state
};

// Where and how a checkpoint is saved.
struct SaveRequest {
  std::string root;      // the job's checkpoint directory: the save is <root>/step-NNNNNNN
  int64_t keep_last = 1;  // committed checkpoints kept; older ones of lower steps are pruned
  // checkpoint_type "full": model.h5 holding every tensor in its own shape, written by world rank
  // 0, to which its shard group gathers one flat parameter at a time.
  bool consolidated = false;
  // Where several replicas hold each shard (HSDP, NO_SHARD), each writes a disjoint part of it
  // (fsdp::replica_part), so that no rank writes more than its share; else the replica of world
  // rank 0 writes its shards whole. The checkpoint holds the same either way.
  bool fully_parallel = true;
  // Checksums taken during the last optimizer update (update_crcs.h), used for the units they
  // still describe; null: computed as the slices are written.
  UpdateCrcs* taken = nullptr;
};

// Collective over the groups' world. Writes <root>/step-NNNNNNN, points <root>/latest at it, then
// prunes committed checkpoints beyond the newest `keep_last` (failures there are logged as
// warnings: the checkpoint is committed). On any rank's failure to write, every rank throws and
// nothing is committed. `optimizer` may be null (weights only).
std::string save_checkpoint(fsdp::FsdpLlama& model, fsdp::Optimizer* optimizer, const TrainingState& state,
                            dist::ProcessGroups& groups, const SaveRequest& request);

// Collective over `world`. Fills the model's shards (and the optimizer's moments and step, when both
// the checkpoint and `optimizer` have them) from any checkpoint, whatever world size and strategy
// wrote it; every block read is checked against its checksum. Replicas of a shard (HSDP) read a
// part of it each and share the parts over their replicate group: each byte is read once. Returns the training state. An
// adapter checkpoint fills only the trainable (adapter) shards; it loads only into a model with
// adapters, and a full-model checkpoint only into one without.
TrainingState load_sharded_checkpoint(fsdp::FsdpLlama& model, fsdp::Optimizer* optimizer, const std::string& dir,
                                      dist::Communicator& world);

struct VerifyReport {
  int64_t slices = 0;
  int64_t bytes = 0;
  std::vector<std::string> problems;  // each names the file, the tensor and the elements
};

// Reads every slice of the checkpoint and checks each of its blocks against its checksum, in pieces
// of bounded size whatever the slice; every bad slice is reported, not only the first.
// `on_read` hears the bytes of every piece read.
VerifyReport verify_sharded_checkpoint(const std::string& dir,
                                       const std::function<void(int64_t bytes)>& on_read = nullptr);

}  // namespace shardtune::checkpoint
