// Streaming weights into FSDP shards with bounded memory: the model was built on the meta device
// and wrapped, so each rank holds only its (empty) shards. One reader per node (or world rank 0
// only) reads the source round by round: a bounded slice of every shard it serves, in the stored
// dtype, into a staging window shared with the ranks of its node, which convert their own slice
// into their shard while it reads the next round; ranks on other nodes receive their slice as a
// message. No other rank opens the files and no process holds the whole model, or even one unit.
// A reader reads only what the ranks it serves hold, so under FULL_SHARD each node reads its
// 1/nodes of the model; ranks that hold the same shard (replicas under HSDP, every rank under
// NO_SHARD) each take a part of it (shard_layout.h, replica_part) and share the parts over the
// network once a flat parameter is read (replica_parts.h): every byte is read from storage once.
#pragma once

#include <functional>
#include <memory>
#include <optional>

#include "runtime/fsdp/fsdp_llama.h"
#include "runtime/fsdp/tensor_source.h"

namespace shardtune::fsdp {

struct LoadOptions {
  bool reader_per_node = true;  // false: world rank 0 reads for everyone
  // Elements staged per shard and round, in bytes of the stored dtype. The reader's node holds
  // two rounds of every shard it serves in /dev/shm: 2 x shards x stage_bytes.
  int64_t stage_bytes = int64_t(32) << 20;
  // Ranks that pass the same number here form a node (they share memory); -1: the ranks of this
  // host. Tests make nodes of ranks on one host.
  int node = -1;
  // > 0: a reader's ranges of a tensor end at a multiple of this many bytes of its stored data
  // (or at its end), so that each such granule is read whole by one reader: the chunks of a
  // digest taken as the weights stream by (checkpoint/hf/weights_digest.h).
  int64_t granule_bytes = 0;
};

struct LoadStats {
  double seconds = 0;
  uint64_t bytes_read = 0;  // by this rank's source (0 on ranks that do not read)
  bool reader = false;
};

using SourceFactory = std::function<std::unique_ptr<TensorSource>()>;

// Every way the source's tensors differ from the model's parameters: missing, misshapen, of a dtype
// that cannot be trained, or extra (an lm_head.weight beside tied embeddings is allowed, and the
// tensors transformers ignores, model::is_ignored_checkpoint_tensor, go to `ignored`). Each names
// the tensor and, where the source can say, its file. Empty when they match. Weights the source
// stores in NF4 (a bitsandbytes 4-bit folder) match only a QLoRA model (`nf4_base`) of their
// format, and only where QLoRA keeps NF4 (every block projection, or none).
std::vector<std::string> weight_mismatches(model::LlamaForCausalLM& model, const TensorSource& source,
                                           std::vector<std::string>* ignored = nullptr,
                                           const std::optional<quant::Nf4Format>& nf4_base = std::nullopt);

// The log line for the tensors weight_mismatches ignored; empty when there are none.
std::string ignored_tensors_note(const std::vector<std::string>& ignored);

// Collective over `world`, before anything is allocated: world rank 0 opens the source and checks
// it against the model's parameters (every missing, extra or misshapen tensor, every non-float
// dtype); every rank throws the same common::Error(kConfig) when anything is wrong. Rank 0 logs the
// tensors it ignores.
void validate_source(model::LlamaForCausalLM& model, const SourceFactory& open_source, dist::Communicator& world,
                     const std::optional<quant::Nf4Format>& nf4_base = std::nullopt);

// Collective over the model's world group (dist/staging_group.h: every wait bounded by its
// timeout). `open_source` is called only on reading ranks, except for a source that stores the
// base's projections in NF4 already: every rank then opens it to read its own records (no
// conversion, no quantising). The source should have passed validate_source.
LoadStats load_shards(FsdpLlama& model, const SourceFactory& open_source, const LoadOptions& options = {});

}  // namespace shardtune::fsdp
