// The model a job trains, worked out in one place: every rank builds it and the planner on the
// login node plans it. No LibTorch.
#pragma once

#include <string>

#include "common/job/job.h"
#include "runtime/model/llama_config.h"

namespace shardtune::model {

// The preset's shape, or config.json of the model folder. The tiny preset takes its vocabulary
// and special tokens from `tokenizer_json`, the job's tokenizer, when it has one: not for "", a
// SentencePiece tokenizer.model (read once converted to tokenizer.json), or a file that is not
// there (a job validated away from where it runs; the ranks refuse it when they read the data).
LlamaConfig job_model_config(const job::Job& job, const std::string& tokenizer_json);

// Whether the ranks stream the weights into their shards instead of each loading the whole model:
// low_cpu_fsdp, a model of low_cpu_fsdp_min_params or more, or QLoRA's base stored in 4 bits
// (bitsandbytes), which loads only so. The ranks and the planner decide alike.
bool streams_weights(const job::Job& job, const LlamaConfig& config);

}  // namespace shardtune::model
