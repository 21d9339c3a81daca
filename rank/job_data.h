// The job's training and validation data: synthetic, or the user's file read with its format's
// prompt, tokenized by the model's tokenizer, masked, and packed into context_length rows.
#pragma once

#include <mpi.h>

#include <functional>
#include <memory>
#include <string>

#include "checkpoint/manifest.h"
#include "common/job/job.h"
#include "runtime/model/llama_config.h"
#include "runtime/train/dataset.h"

namespace shardtune::rank_program {

// [data] tokenizer, or the model folder's tokenizer.json (else its tokenizer.model); empty for
// synthetic data.
std::string tokenizer_path(const job::Job& job);

struct DataContext;

// The tokenizer.json the job tokenizes with: tokenizer_path's, or, for a SentencePiece
// tokenizer.model, <output_dir>/tokenizer/tokenizer.json converted from it by world rank 0 (with
// shardtune-tokenize, `tool`; libsentencepiece cannot share a process with LibTorch). Collective.
std::string prepare_tokenizer(const job::Job& job, MPI_Comm world, const std::string& tool);

struct JobData {
  std::unique_ptr<train::Dataset> train;
  std::unique_ptr<train::Dataset> val;  // null when there is none
  // Which samples the job trains and in what order, recorded in its checkpoints: a resume over
  // other data is refused (checkpoint/data_identity.h).
  checkpoint::DataIdentity identity;
};

struct DataContext {
  int rank = 0;
  int world_size = 1;
  std::function<void()> barrier;        // all ranks
  std::function<bool(bool)> all_agree;  // all ranks: true when every rank passes true
};

// Every rank builds the same datasets. The tokenized examples are cached in a token file next to
// the data file (or under output_dir), written by rank 0 and mapped by every rank; a later job
// with the same data, tokenizer and prompt format maps it without tokenizing. Throws
// common::Error(kConfig) naming the file, the line or the setting when the data is unusable.
// `tokenizer`: prepare_tokenizer's.
JobData load_job_data(const job::Job& job, const model::LlamaConfig& config, const std::string& tokenizer,
                      const DataContext& context);

}  // namespace shardtune::rank_program
