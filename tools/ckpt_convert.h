// shardtune-ckpt's conversions, each streaming tensors in pieces of bounded size: consolidate (sharded → full),
// reshard (→ the layout of another world size),
// export-hf (→ a Hugging Face safetensors folder), import-hf (Hugging Face folder → full), diff.
#pragma once

#include <cstdint>
#include <string>

namespace shardtune::tools {

void consolidate(const std::string& src, const std::string& out);
// A sharded checkpoint laid out for `world_size` ranks of FULL_SHARD: rank r's file holds exactly
// the slices rank r's shards cover, so each rank of such a job reads one file.
void reshard(const std::string& src, const std::string& out, int world_size);
void export_hf(const std::string& src, const std::string& out, const std::string& dtype, uint64_t max_shard_bytes,
               const std::string& tokenizer_dir);
void import_hf(const std::string& hf_dir, const std::string& out);
// Compares two checkpoints: the training state (step, cursor, optimizer step, loss scale, reference
// batch, pending validation), the model config and the adapter record, one line per difference,
// and every tensor's weights and AdamW moments, one line each with its largest absolute and
// relative difference (a tensor or moment only one holds is a difference). Not compared: the
// layout and world size (reshard and consolidate change them, not the values) and the recorded
// job file (it names each run's own paths). `params_only`: the weights alone. True when anything
// compared differs.
bool diff(const std::string& a, const std::string& b, bool params_only);

}  // namespace shardtune::tools
