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
// Prints the largest absolute and relative difference of every parameter; returns the largest
// absolute difference over all (infinity when the tensor sets or shapes differ).
double diff(const std::string& a, const std::string& b);

}  // namespace shardtune::tools
