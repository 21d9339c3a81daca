// DPO's reference log-probabilities of every pair of a dataset, computed once ([dpo] reference =
// "precomputed"): the pairs in batches of `per_rank` per rank over every rank, each rank its share
// (as validation splits rows), then summed so that every rank holds all of them.
#pragma once

#include <vector>

#include "runtime/data/dataset.h"
#include "runtime/dist/communicator.h"
#include "runtime/train/dpo.h"

namespace shardtune::train {

// Two values a pair, chosen then rejected, in pair order. Collective over `world` (the reference's
// forward passes are).
std::vector<double> compute_reference_logps(const data::Dataset& pairs, const ReferenceLogps& reference,
                                            int64_t per_rank, dist::Communicator& world);

}  // namespace shardtune::train
