// Streaming weights into FSDP shards with bounded memory: the model was built on the meta device
// and wrapped, so each rank holds only its (empty) shards. One reader per node (or world rank 0
// only) reads the source flat parameter by flat parameter and sends every rank of its node
// exactly that rank's range; no other rank opens the files and no process holds the whole model.
#pragma once

#include <mpi.h>

#include <functional>
#include <memory>

#include "checkpoint/tensor_source.h"
#include "runtime/fsdp/fsdp_llama.h"

namespace shardtune::fsdp {

struct LoadOptions {
  bool reader_per_node = true;  // false: world rank 0 reads for everyone
};

struct LoadStats {
  double seconds = 0;
  uint64_t bytes_read = 0;  // by this rank's source (0 on ranks that do not read)
  bool reader = false;
};

using SourceFactory = std::function<std::unique_ptr<checkpoint::TensorSource>()>;

// Every way the source's tensors differ from the model's parameters: missing, misshapen, of a dtype
// that cannot be trained, or extra (an lm_head.weight beside tied embeddings is allowed). Each
// names the tensor and, where the source can say, its file. Empty when they match.
std::vector<std::string> weight_mismatches(model::LlamaForCausalLM& model, const checkpoint::TensorSource& source);

// Collective over `world`, before anything is allocated: world rank 0 opens the source and checks
// it against the model's parameters (every missing, extra or misshapen tensor, every non-float
// dtype); every rank throws the same common::Error(kConfig) when anything is wrong.
void validate_source(model::LlamaForCausalLM& model, const SourceFactory& open_source, MPI_Comm world);

// Collective over `world`. `open_source` is called only on reading ranks. The source should have
// passed validate_source.
LoadStats load_shards(FsdpLlama& model, const SourceFactory& open_source, MPI_Comm world,
                      const LoadOptions& options = {});

}  // namespace shardtune::fsdp
