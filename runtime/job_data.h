// The job's training and validation data: synthetic, or the user's file read with its format's
// prompt, tokenized by the model's tokenizer, masked, and packed into context_length rows.
#pragma once

#include <memory>
#include <string>

#include "common/job/job.h"
#include "runtime/model/llama_config.h"
#include "runtime/train/dataset.h"

namespace shardtune::runtime {

// [data] tokenizer, or tokenizer.json of the model folder; empty for synthetic data.
std::string tokenizer_path(const job::Job& job);

struct JobData {
  std::unique_ptr<train::Dataset> train;
  std::unique_ptr<train::Dataset> val;  // null when there is none
};

// Every rank builds the same datasets. Throws common::Error(kConfig) naming the file, the line
// or the setting when the data cannot make one global batch.
JobData load_job_data(const job::Job& job, const model::LlamaConfig& config, int world_size);

}  // namespace shardtune::runtime
