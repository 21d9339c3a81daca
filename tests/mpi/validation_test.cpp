// Validation evaluates every row once at any world size, and its loss is the mean over every
// learned token: the same at 1 to 4 ranks, equal to a float64 computation over all rows in one
// process within 1e-6, on a set that no batch divides, with rows of different lengths and numbers
// of learned tokens.
#include <ATen/core/grad_mode.h>
#include <ATen/ops/tensor.h>
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>

#include "runtime/fsdp/fsdp_llama.h"
#include "runtime/fsdp/fsdp_options.h"
#include "runtime/model/init.h"
#include "runtime/model/llama.h"
#include "runtime/train/evaluate.h"
#include "test_device.h"

namespace shardtune {
namespace {

constexpr int64_t kVocab = 256;

// 7 rows of 5 to 17 tokens; row r learns its last r + 1 tokens (the first label never counts).
class Rows : public data::Dataset {
 public:
  int64_t size() const override { return 7; }
  data::Sample get(int64_t index) const override {
    data::Sample s;
    const int64_t n = 5 + 2 * index;
    for (int64_t t = 0; t < n; ++t) {
      s.input_ids.push_back((index * 37 + t * 11) % kVocab);
      s.labels.push_back(t >= n - (index + 1) ? (index * 13 + t * 7) % kVocab : -100);
    }
    return s;
  }
};

// Σ −log p(label) over every learned token of every row, and their count, in float64 from an
// unsharded model's fp32 logits, one row at a time.
std::pair<double, int64_t> reference(model::LlamaForCausalLM& m, const data::Dataset& dataset) {
  at::NoGradGuard no_grad;
  double sum = 0;
  int64_t tokens = 0;
  for (int64_t r = 0; r < dataset.size(); ++r) {
    const data::Sample s = dataset.get(r);
    const int64_t n = static_cast<int64_t>(s.input_ids.size());
    const at::Tensor ids = at::tensor(s.input_ids, at::kLong).reshape({1, n});
    const at::Tensor logp = m.forward(ids).to(at::kDouble).log_softmax(-1);
    for (int64_t t = 0; t + 1 < n; ++t) {
      const int64_t label = s.labels[static_cast<size_t>(t + 1)];
      if (label < 0) continue;
      sum -= logp[0][t][label].item<double>();
      ++tokens;
    }
  }
  return {sum, tokens};
}

TEST(Validation, EveryRowOnceAndTheSameLossAtEveryWorldSize) {
  int world = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  model::LlamaConfig config = model::LlamaConfig::tiny();
  config.vocab_size = kVocab;
  model::LlamaForCausalLM m(config, at::TensorOptions().dtype(at::kFloat));
  model::init_weights(m, 3);
  const Rows dataset;
  const auto [sum, tokens] = reference(m, dataset);

  job::Job job;
  job.train.mixed_precision = false;
  job.slurm.ntasks_per_node = world;
  const fsdp::FsdpOptions options =
      fsdp::fsdp_options(job.fsdp, job.train, world, world, testing_support::test_device());
  dist::ProcessGroups groups = testing_support::make_test_groups(options.shard_size);
  fsdp::FsdpLlama sharded(m, groups, options);
  for (int64_t per_rank : {1, 2, 3, 8}) {
    SCOPED_TRACE(per_rank);
    const train::Evaluation e = train::evaluate(sharded, dataset, per_rank, 0, *groups.world);
    EXPECT_EQ(e.rows, 7);
    EXPECT_EQ(e.tokens, tokens);
    EXPECT_EQ(e.batches, (7 + per_rank * world - 1) / (per_rank * world));
    EXPECT_NEAR(e.loss, sum / static_cast<double>(tokens), 1e-6 * sum / static_cast<double>(tokens));
  }
  // max_eval_step caps the global batches: 1 batch of 1 row per rank evaluates `world` rows.
  const train::Evaluation capped = train::evaluate(sharded, dataset, 1, 1, *groups.world);
  EXPECT_EQ(capped.batches, 1);
  EXPECT_EQ(capped.rows, std::min<int64_t>(world, 7));
}

}  // namespace
}  // namespace shardtune
