// Checkpoints. Sharded: every rank of one replica writes the slices of parameters (and AdamW
// moments) its shards hold into its own HDF5 file, recording each slice's tensor, global element
// offset, length and CRC-32 in a manifest written last. Loading at any world size or strategy is
// a different selection of the same slices. A checkpoint is committed atomically: a temporary
// directory, every file closed and fsynced, all ranks agreeing, the manifest, a rename, `latest`.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "runtime/dist/process_groups.h"
#include "runtime/fsdp/adamw.h"
#include "runtime/fsdp/fsdp_llama.h"

namespace shardtune::checkpoint {

// 2: a CRC-32 per block of each slice ("crc32_blocks", "crc32_block"); 1 (still read): one per slice.
inline constexpr int kShardedFormatVersion = 2;

struct TrainingState {
  int64_t step = 0;           // optimizer steps taken
  int64_t epoch = 0;          // the epoch the next step belongs to
  int64_t sample_in_epoch = 0;  // samples of that epoch's global order already trained on
  double loss_scale = 0;      // fp16 loss scale (0 when unused)
  std::string job_toml;       // the resolved job that wrote it
  std::string model_config;   // the model's config.json, so the checkpoint converts to HF alone
};

// Collective over the groups' world. Writes <root>/step-NNNNNNN and points <root>/latest at it,
// then removes committed checkpoints beyond the newest `keep_last`. On any rank's failure every
// rank throws, and the partial directory is removed. `optimizer` may be null (weights only).
// consolidated (checkpoint_type "full"): one file, model.h5, holding every tensor whole in its own
// shape, written by world rank 0, to which its shard group gathers one flat parameter at a time;
// otherwise every rank of the first replica writes its own slices. Both load the same way.
std::string save_checkpoint(fsdp::FsdpLlama& model, fsdp::AdamW* optimizer, const TrainingState& state,
                            dist::ProcessGroups& groups, const std::string& root, int64_t keep_last,
                            bool consolidated = false);

// The newest committed checkpoint under `root` (one whose manifest parses), or nullopt.
std::optional<std::string> find_latest_checkpoint(const std::string& root);

// Collective. Fills the model's shards (and the optimizer's moments and step, when both the
// checkpoint and `optimizer` have them) from any sharded checkpoint, whatever world size and
// strategy wrote it; every slice read is checked against its CRC-32. Returns the training state.
TrainingState load_sharded_checkpoint(fsdp::FsdpLlama& model, fsdp::AdamW* optimizer, const std::string& dir,
                                      MPI_Comm world);

// The manifest of a committed checkpoint (throws common::Error(kIo) naming what is wrong).
nlohmann::json read_checkpoint_manifest(const std::string& dir);

struct VerifyReport {
  int64_t slices = 0;
  int64_t bytes = 0;
  std::vector<std::string> problems;  // each names the file, the tensor and the elements
};

// Reads every slice of the checkpoint and checks each of its blocks against its CRC-32, in pieces of
// bounded size whatever the slice.
VerifyReport verify_sharded_checkpoint(const std::string& dir);

}  // namespace shardtune::checkpoint
