// The manifest of a checkpoint (manifest.json, written last): the training state, every tensor's
// shape, and every slice (which file, which dataset, which elements, their block checksums). This
// is the only place the manifest's keys appear. Reading validates everything before anything is
// used and lists every problem at once: types and ranges, file names that stay inside the
// checkpoint directory, slices that tile each tensor exactly (no gap, no overlap), checksum counts
// that fit, and, from format 3, the manifest's own checksum.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "checkpoint/block_crc.h"
#include "runtime/data/data_identity.h"

namespace shardtune::checkpoint {

// 3: the manifest carries its own CRC-32; 2: a CRC-32 per block of each slice; 1: one per slice.
// Every version from 1 is read; 3 is written.
inline constexpr int kManifestVersion = 4;
inline constexpr const char* kManifestFile = "manifest.json";
// The kinds of state a checkpoint holds of each tensor: its values, AdamW's two moments (fp32;
// an 8-bit optimizer's decoded, code · scale), an 8-bit optimizer's scales of the moments, one
// per Manifest::state_block elements of the tensor, and Adafactor's row and column means of a
// matrix's squared gradient (a vector's second moment is exp_avg_sq, its first moment exp_avg).
inline constexpr const char* kParamKind = "param";
inline constexpr const char* kStateKinds[] = {"param",          "exp_avg",          "exp_avg_sq", "exp_avg_absmax",
                                              "exp_avg_sq_absmax", "exp_avg_sq_row", "exp_avg_sq_col"};
inline constexpr const char* kScaleKinds[] = {"exp_avg_absmax", "exp_avg_sq_absmax"};
inline constexpr const char* kFactorKinds[] = {"exp_avg_sq_row", "exp_avg_sq_col"};
bool is_scale_kind(const std::string& kind);
bool is_factor_kind(const std::string& kind);
// The optimizers whose state a checkpoint may hold, as [train] optimizer spells them.
inline constexpr const char* kOptimizerNames[] = {"adamw", "adamw_8bit", "adafactor"};

struct ManifestTensor {
  std::vector<int64_t> shape;
  std::string dtype = "F32";
  int64_t numel() const;
};

// Elements of `kind` of a tensor: its own; for a scale kind one per `state_block` of them; for a
// factor kind one per row or column of a matrix (-1 for a tensor that is not one).
int64_t kind_numel(const std::string& kind, const ManifestTensor& t, int64_t state_block);
// The shape of `kind` of a tensor: the tensor's, or a vector of kind_numel for scales and factors.
std::vector<int64_t> kind_shape(const std::string& kind, const ManifestTensor& t, int64_t state_block);

struct ManifestSlice {
  std::string kind;     // one of kStateKinds
  std::string tensor;   // the Hugging Face name
  std::string file;     // a file of the checkpoint directory, by its plain name
  std::string dataset;  // the dataset's name inside the file's group /<kind>/
  int64_t offset = 0;   // first element of the flattened tensor
  int64_t length = 0;
  int64_t block = kCrcBlock;   // elements per checksum (format 1: the whole slice)
  std::vector<uint32_t> crcs;  // one per block
  // Element of the dataset where the slice starts (version 4: a rank file's dataset holds a whole
  // flat shard, so several slices share it; 0 in every earlier version).
  int64_t dataset_offset = 0;
};

// A LoRA checkpoint holds only the adapters (and their AdamW moments): this records how they were
// made and the base model they adapt, which a resume and the tools compare with theirs.
// How the base's weights_sha256 was taken: SHA-256 of 1 MiB chunks (weights_digest.h).
inline constexpr const char* kWeightsHash = "sha256-1MiB-chunks";

struct AdapterRecord {
  std::string method = "lora";              // or "qlora": the base's projections in NF4
  int64_t nf4_block_size = 0;               // qlora: the NF4 format the adapters were trained on
  bool nf4_double_quant = false;
  int64_t r = 0;
  double alpha = 0;
  double dropout = 0;
  std::vector<std::string> target_modules;  // as expanded ("all-linear" spelled out)
  std::string base_path;                    // the base model folder, or "preset:<name>"
  std::string base_config_sha256;           // SHA-256 of the base's config.json
  std::string base_tensors_sha256;          // SHA-256 of its tensor index (every name, dtype, shape)
  // SHA-256 of every byte of every tensor (checkpoint/hf/weights_digest.h); empty in older
  // checkpoints, and in those that hashed each tensor whole ("weights_hash": "all-bytes").
  std::string base_weights_sha256;
  std::string base_weights_sample_sha256;   // SHA-256 of the first 64 bytes of every tensor
};

struct Manifest {
  int version = kManifestVersion;
  std::string layout = "sharded";  // "sharded": a file per writing rank; "full": model.h5
  int64_t step = 0;                // optimizer steps taken
  // Its place in the directory's history: one more than any checkpoint committed there before it
  // (checkpoint/commit.h). 0 in checkpoints from before commit numbers: their step stands in.
  int64_t commit = 0;
  int64_t epoch = 0;               // the epoch the next step belongs to
  int64_t sample_in_epoch = 0;     // samples of that epoch's global order already trained on
  double loss_scale = 0;           // fp16 loss scale (0 when unused)
  int64_t reference_batch = 0;     // the global batch step-counted keys mean (0: not recorded)
  bool validation_pending = false;  // the epoch ending at the cursor was not validated before the save
  int64_t optimizer_step = 0;
  // AdamW's own step of each tensor whose count differs from optimizer_step (layers unfrozen on a
  // resume started theirs later); empty in most checkpoints.
  std::map<std::string, int64_t> moment_steps;
  bool has_optimizer = false;
  // Whose state the moments are ("adamw" in checkpoints from before the key), and for
  // "adamw_8bit" the elements per scale.
  std::string optimizer = "adamw";
  int64_t state_block = 0;
  int64_t world_size = 1;
  int64_t shard_group_size = 1;
  std::string job_toml;               // the resolved job that wrote it
  nlohmann::json model_config;        // the model's config.json; null when not recorded
  std::optional<AdapterRecord> adapter;  // set: an adapter checkpoint (tensors are the adapters only)
  data::DataIdentity data;                   // what was trained on, in what order; empty when not recorded
  std::map<std::string, ManifestTensor> tensors;
  std::vector<ManifestSlice> slices;  // in any order; they tile each (kind, tensor) exactly
};

// The manifest as written: JSON of the current version with its checksum.
std::string manifest_text(const Manifest& m);

// Parses and validates. Throws common::Error(kIo) naming `where` and every problem found.
Manifest parse_manifest(const std::string& text, const std::string& where);

// The manifest of the committed checkpoint `dir` (throws common::Error(kIo) if it has none or it
// is broken).
Manifest read_manifest(const std::string& dir);

// The commit number of checkpoint `dir`'s manifest, read from the head of the file (the writer
// puts it among the first keys; a 512-rank manifest is tens of megabytes): nullopt when the file
// is missing, does not read as JSON up to it, or has none. Not a validation: read_manifest is.
std::optional<int64_t> read_manifest_commit(const std::string& dir);

// Manifests parsed in full by this process so far (commit costs are counted by tests).
int64_t manifests_parsed();

// Slices as text between ranks: each writer sends its own to the rank that commits.
std::string slices_text(const std::vector<ManifestSlice>& slices);
std::vector<ManifestSlice> parse_slices_text(const std::string& text);

// A name that can only mean a file of the checkpoint directory itself: not empty, no '/', not "."
// or "..", no control characters.
bool is_plain_file_name(const std::string& name);

}  // namespace shardtune::checkpoint
