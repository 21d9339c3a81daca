// The job's training and validation data, from its [data] and [train] sections: synthetic, or the
// user's file read with its format's prompt, tokenized by the model's tokenizer into a token file
// cached for later runs, masked, and batched into samples (packed rows of context_length, or
// padded examples). No LibTorch: what the rank program trains on, testable on its own.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/job/job.h"
#include "runtime/data/data_identity.h"
#include "runtime/data/dataset.h"
#include "runtime/data/mixture.h"

namespace shardtune::data {

// [data] tokenizer, or the model folder's tokenizer.json (else its tokenizer.model); empty for
// synthetic data.
std::string tokenizer_path(const job::Job& job);

// How the job's ranks act together while the data is made; each is collective over the world.
struct DataContext {
  int rank = 0;
  int world_size = 1;
  // Runs `decide` on rank 0 alone, as work the others wait for (said as `what`), and returns its
  // value on every rank, or throws its error on every rank.
  std::function<std::string(const std::string& what, const std::function<std::string()>& decide)> on_root;
  // True when every rank passes true.
  std::function<bool(bool)> all_agree;
};

// A context of one rank alone (tools, tests).
DataContext single_rank();

// The tokenizer.json the job tokenizes with: tokenizer_path's, or, for a SentencePiece
// tokenizer.model, <output_dir>/tokenizer/tokenizer.json converted from it by rank 0 (with
// shardtune-tokenize, `tool`; libsentencepiece cannot share a process with LibTorch). Collective.
std::string prepare_tokenizer(const job::Job& job, const DataContext& context, const std::string& tool);

// What the model tells the data: its vocabulary's size and its special tokens, where the tokenizer
// does not name them.
struct ModelTokens {
  int64_t vocab_size = 0;
  int64_t bos_token_id = -1;
  std::vector<int64_t> eos_token_ids;
};

struct JobData {
  std::unique_ptr<Dataset> train;
  std::unique_ptr<Dataset> val;  // null when there is none
  // Which samples the job trains and in what order, recorded in its checkpoints: a resume over
  // other data is refused (checkpoint/data_identity.h).
  DataIdentity identity;
  // How an epoch draws on the training sources (one source: the dataset alone), and where each
  // source's validation part lies in `val` (empty with one source).
  Mixture mixture;
  std::vector<MixtureSource> val_sources;
};

// Every rank builds the same datasets. The tokenized examples are cached in a token file next to
// the data file (or under output_dir), written by rank 0 and mapped by every rank; a later job
// with the same data, tokenizer and prompt format maps it without tokenizing. Throws
// common::Error(kConfig) naming the file, the line or the setting when the data is unusable, or
// when it holds fewer samples than one global batch at `context.world_size` ranks.
// `tokenizer`: prepare_tokenizer's.
JobData load_job_data(const job::Job& job, const ModelTokens& model, const std::string& tokenizer,
                      const DataContext& context);

}  // namespace shardtune::data
