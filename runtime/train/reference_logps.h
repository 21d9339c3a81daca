// DPO's reference log-probabilities of every pair of a dataset, computed once ([dpo] reference =
// "precomputed"): the pairs in batches of `per_rank` per rank over every rank, each rank its share
// (as validation splits rows), then summed so that every rank holds all of them; stored in a file
// named after the pairs' tokens and the reference's identity, which later starts read instead.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/job/job.h"
#include "runtime/data/dataset.h"
#include "runtime/dist/communicator.h"
#include "runtime/train/dpo.h"

namespace shardtune::train {

// Two values a pair, chosen then rejected, in pair order. Collective over `world` (the reference's
// forward passes are).
std::vector<double> compute_reference_logps(const data::Dataset& pairs, const ReferenceLogps& reference,
                                            int64_t per_rank, dist::Communicator& world);

// The reference's weights in words that change whenever they do: the base's SHA-256 (LoRA on a
// pretrained base, `base_sha256`), a folder's files' identities (size, times, inode), or a preset's
// seeded initialisation; with the dtype its numbers are computed in. Checkpoints record it: a
// resume against another reference is refused.
std::string dpo_reference_identity(const job::Job& job, const std::string& base_sha256);

// `pairs` (a data::PreferenceDataset; `name`: "training" or "validation") with each pair's
// reference log-probabilities: read from their file under `dir` when every rank finds it, else
// computed by the reference `compute` returns (asked for once, on every rank) and written there by
// world rank 0. `what` starts the log lines. Collective over `world`.
std::unique_ptr<data::Dataset> with_precomputed_reference(const data::Dataset& pairs, const std::string& name,
                                                          const std::string& dir, const std::string& identity,
                                                          const std::function<const ReferenceLogps&()>& compute,
                                                          int64_t per_rank, dist::Communicator& world,
                                                          const std::string& what);

}  // namespace shardtune::train
