// Computing the reference's log-probabilities of a dataset's pairs.
#include "runtime/train/reference_logps.h"

#include <ATen/ops/zeros.h>

#include "common/error.h"
#include "runtime/train/collate.h"
#include "runtime/train/evaluate.h"

namespace shardtune::train {

std::vector<double> compute_reference_logps(const data::Dataset& pairs, const ReferenceLogps& reference,
                                            int64_t per_rank, dist::Communicator& world) {
  const int ranks = world.size(), rank = world.rank();
  const int64_t n = pairs.size();
  at::Tensor all = at::zeros({2 * n}, at::kDouble);
  double* out = all.data_ptr<double>();
  const int64_t batches = eval_batches(n, per_rank, ranks);
  for (int64_t b = 0; b < batches; ++b) {
    const std::vector<int64_t> mine = eval_rows(n, per_rank, b, rank, ranks);
    // A rank without pairs in this batch still takes part in the forward's collectives.
    const Batch batch = collate(pairs, mine.empty() ? std::vector<int64_t>{b * per_rank * ranks} : mine);
    const at::Tensor logps = reference(batch).to(at::kCPU, at::kDouble).contiguous();
    if (mine.empty()) continue;
    const int64_t p = batch.pairs;
    ST_CHECK(logps.numel() == 2 * p, common::ErrorKind::kInternal, "{} reference values for {} pairs", logps.numel(), p);
    const double* v = logps.data_ptr<double>();
    for (int64_t i = 0; i < p; ++i) {
      out[2 * mine[static_cast<size_t>(i)]] = v[i];
      out[2 * mine[static_cast<size_t>(i)] + 1] = v[p + i];
    }
  }
  world.all_reduce(all, dist::ReduceOp::kSum);  // each pair's values come from one rank, the others add 0
  return std::vector<double>(all.data_ptr<double>(), all.data_ptr<double>() + 2 * n);
}

}  // namespace shardtune::train
