// The model a job trains, worked out in one place: every rank builds it and the planner on the
// login node plans it. No LibTorch.
#pragma once

#include <string>

#include "common/job/job.h"
#include "runtime/model/llama_config.h"

namespace shardtune::model {

// The preset's shape, or config.json of the model folder. The tiny preset takes its vocabulary
// and special tokens from `tokenizer_json`, the job's tokenizer, when it has one ("" or a
// SentencePiece tokenizer.model, which is read once converted: the preset's own).
LlamaConfig job_model_config(const job::Job& job, const std::string& tokenizer_json);

}  // namespace shardtune::model
