// A flat parameter's gradient path against the exact sum: gradients accumulated over micro-batches
// (a parameter reached twice, once, or never), reduced over the shard group and, under HSDP,
// across replicas, then added into a gradient shard that already holds a value. Each rank's
// gradients differ; the expected shard is computed in float64 from all of them. Each round starts
// after freeing a buffer of NaN of the reduction's size, so that a reused buffer cannot pass off
// stale values for the zeros of a parameter no gradient reached. At every world size, with the whole world as one
// shard group, and with shard groups of one rank (the path that skips the reduce-scatter).
#include <ATen/TensorOperators.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/equal.h>
#include <ATen/ops/full.h>
#include <ATen/ops/zeros.h>
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <memory>
#include <random>

#include "runtime/fsdp/flat_param.h"
#include "tests/mpi/test_device.h"

namespace shardtune {
namespace {

// A gradient of `numel` values that depends on the rank, the round, the micro-batch and the parameter.
at::Tensor grad_of(int64_t numel, int rank, int round, int micro, int param) {
  at::Tensor g = at::zeros({numel}, at::TensorOptions().dtype(at::kDouble));
  for (int64_t i = 0; i < numel; ++i)
    g[i] = std::sin(1.0 + i + 7.0 * rank + 13.0 * round + 29.0 * micro + 101.0 * param);
  return g;
}

// A flat parameter of a (5), b (2 x 3), c (3) and d (4) on the test device: this rank's shard of it
// in shard groups of `shard_size`.
struct TestFlat {
  TestFlat(int shard_size, int rank)
      : layout({{"a", {5}}, {"b", {2, 3}}, {"c", {3}}, {"d", {4}}}, shard_size), shard_rank(rank % shard_size) {
    options.device = testing_support::test_device();
    options.shard_size = shard_size;
    for (const fsdp::ParamSpan& p : layout.params()) values.push_back(at::zeros(p.shape));
    for (at::Tensor& v : values) slots.push_back(&v);
    flat = std::make_unique<fsdp::FlatParam>(layout, slots, /*trainable=*/true, options, shard_rank);
  }
  fsdp::FsdpOptions options;
  fsdp::FlatLayout layout;
  int shard_rank;
  std::vector<at::Tensor> values;
  std::vector<at::Tensor*> slots;
  std::unique_ptr<fsdp::FlatParam> flat;
};

void check_gradient_path(int shard_size) {
  int rank = 0, world = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  dist::ProcessGroups groups = testing_support::make_test_groups(shard_size);
  TestFlat test(shard_size, rank);
  const fsdp::FsdpOptions& options = test.options;
  const fsdp::FlatLayout& layout = test.layout;
  const int shard_rank = test.shard_rank;
  fsdp::FlatParam& flat = *test.flat;
  flat.grad_shard().fill_(0.5);

  // Micro-batch 0 reaches a and c, micro-batch 1 reaches a and d; b is never reached.
  const std::vector<std::pair<int, int>> reached = {{0, 0}, {0, 2}, {1, 0}, {1, 3}};
  at::Tensor expected_shard = at::full({layout.shard_numel()}, 0.5, at::TensorOptions().dtype(at::kDouble));
  for (int round = 0; round < 3; ++round) {
    // A freed buffer of the reduction's size full of NaN, which the allocator is likely to hand
    // out again: zeros that were never written would show.
    at::full({layout.padded_numel()}, NAN, at::TensorOptions().device(options.device));
    for (const auto& [micro, param] : reached) {
      const fsdp::ParamSpan& p = layout.params()[static_cast<size_t>(param)];
      flat.accumulate_grad(static_cast<size_t>(param),
                           grad_of(p.numel, rank, round, micro, param).to(at::kFloat).view(p.shape).to(options.device));
    }
    flat.reduce_grad(*groups.shard, *groups.replicate);
    // The average over every rank of each rank's accumulated gradient, in float64.
    at::Tensor full = at::zeros({layout.padded_numel()}, at::TensorOptions().dtype(at::kDouble));
    for (int r = 0; r < world; ++r)
      for (const auto& [micro, param] : reached) {
        const fsdp::ParamSpan& p = layout.params()[static_cast<size_t>(param)];
        full.narrow(0, p.offset, p.numel) += grad_of(p.numel, r, round, micro, param).to(at::kFloat).to(at::kDouble) / world;
      }
    expected_shard += full.narrow(0, layout.shard_begin(shard_rank), layout.shard_numel());
    const at::Tensor got = flat.grad_shard().to(at::kCPU).to(at::kDouble);
    // Each element: a sum of 2·world fp32 values of magnitude ≤ 1, averaged, then added to the
    // shard; fp32 rounding bounds the error by (2·world + 3)·u·(its magnitude, at most 2·3 + 0.5).
    const double bound = (2.0 * world + 3) * std::ldexp(1.0, -24) * 7;
    const at::Tensor error = (got - expected_shard).abs();
    EXPECT_LE(error.max().item<double>(), bound)
        << "round " << round << ", shard groups of " << shard_size << ": element " << error.argmax().item<int64_t>()
        << " is " << got[error.argmax()].item<double>() << ", expected " << expected_shard[error.argmax()].item<double>();
  }
}

// A rank alone (no shard group, no replicas to reduce with): its gradients go straight into the
// gradient shard, with no unsharded buffer, and equal the exact sum of its own gradients. Where
// the reduce dtype differs from the shard's (its rounding is part of the result), the gradient
// still goes through the buffer.
TEST(FlatParamGradients, ARankAloneAddsStraightIntoItsShard) {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  for (const at::ScalarType reduce : {at::kFloat, at::kBFloat16}) {
    fsdp::FsdpOptions options;
    options.device = testing_support::test_device();
    options.precision.reduce = reduce;
    const fsdp::FlatLayout layout({{"a", {5}}, {"b", {2, 3}}, {"c", {3}}, {"d", {4}}}, 1);
    std::vector<at::Tensor> values;
    std::vector<at::Tensor*> slots;
    for (const fsdp::ParamSpan& p : layout.params()) values.push_back(at::zeros(p.shape));
    for (at::Tensor& v : values) slots.push_back(&v);
    fsdp::FlatParam flat(layout, slots, /*trainable=*/true, options, 0);
    flat.grad_shard().fill_(0.5);
    const std::vector<std::pair<int, int>> reached = {{0, 0}, {0, 2}, {1, 0}, {1, 3}};
    at::Tensor expected = at::full({layout.shard_numel()}, 0.5, at::TensorOptions().dtype(at::kDouble));
    for (int round = 0; round < 3; ++round) {
      for (const auto& [micro, param] : reached) {
        const fsdp::ParamSpan& p = layout.params()[static_cast<size_t>(param)];
        const at::Tensor g = grad_of(p.numel, rank, round, micro, param).to(at::kFloat);
        flat.accumulate_grad(static_cast<size_t>(param), g.view(p.shape).to(options.device), /*unreduced=*/false);
        expected.narrow(0, p.offset, p.numel) += g.to(at::kDouble);
      }
      EXPECT_EQ(flat.has_unreduced_grad(), reduce != at::kFloat) << "reduce dtype " << reduce;
      dist::ProcessGroups alone = testing_support::make_test_groups(1);
      if (flat.has_unreduced_grad()) flat.reduce_grad(*alone.shard, *alone.shard);
      const at::Tensor got = flat.grad_shard().to(at::kCPU).to(at::kDouble);
      // Each element takes at most 2·round + 3 rounded adds (bf16: as many roundings to 8 bits),
      // every partial sum below 2·round + 2.5 in magnitude.
      const double u = reduce == at::kFloat ? std::ldexp(1.0, -24) : std::ldexp(1.0, -8);
      const double bound = (2.0 * round + 3) * u * (2.0 * round + 2.5);
      const at::Tensor error = (got - expected).abs();
      EXPECT_LE(error.max().item<double>(), bound) << "round " << round << ", reduce dtype " << reduce;
    }
  }
}

// zero_grad leaves a pending zero (FlatParam::zero_grad): a parameter's first gradient after it is
// copied in, a whole reduced shard copied over, and settle_grad zeroes what none reached. Under any
// sequence of zero_grad, backward passes reaching random parameters (a rank alone: straight into
// the shard; otherwise through the reduction), writes over the whole shard (as a loss scaler's) and
// settling, the shard seen both through grad_shard() and through a tensor taken before (as the
// optimizer holds it, read after settle_grad) equals the sum kept in float64 alongside, bit for
// bit: every gradient is a multiple of 1/8 below 4 in magnitude and the same on every rank, so
// every sum and average is exact; the gaps and padding are zero wherever a fill has not set them.
void check_any_sequence(int shard_size) {
  int world = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  dist::ProcessGroups groups = testing_support::make_test_groups(shard_size);
  TestFlat test(shard_size, rank);
  const fsdp::FsdpOptions& options = test.options;
  const fsdp::FlatLayout& layout = test.layout;
  const int shard_rank = test.shard_rank;
  fsdp::FlatParam& flat = *test.flat;
  const bool alone = shard_size == 1 && world / shard_size == 1;  // no reduction at all
  const at::Tensor held = flat.grad_shard();
  const auto f64 = at::TensorOptions().dtype(at::kDouble);
  at::Tensor full = at::zeros({layout.padded_numel()}, f64);  // the whole buffer's expected gradient
  std::mt19937 rng(11);  // the same on every rank: the same collectives in the same order
  int checked = 0;
  for (int op = 0; op < 400; ++op) {
    const int kind = static_cast<int>(rng() % 6);
    if (kind == 0) {
      flat.zero_grad();
      full.zero_();
    } else if (kind <= 2) {  // a backward reaching some parameters, one of them twice maybe
      const int reach = 1 + static_cast<int>(rng() % 5);
      for (int i = 0; i < reach; ++i) {
        const size_t param = rng() % layout.params().size();
        const fsdp::ParamSpan& p = layout.params()[param];
        at::Tensor g = at::empty({p.numel}, f64);
        for (int64_t j = 0; j < p.numel; ++j) g[j] = static_cast<double>(static_cast<int>(rng() % 63) - 31) / 8;
        flat.accumulate_grad(param, g.to(at::kFloat).view(p.shape).to(options.device), /*unreduced=*/!alone);
        full.narrow(0, p.offset, p.numel) += g;
      }
      if (flat.has_unreduced_grad()) flat.reduce_grad(*groups.shard, *groups.replicate);
    } else if (kind == 3) {  // a write over the whole shard, gaps included
      const double v = static_cast<double>(static_cast<int>(rng() % 9) - 4) / 4;
      flat.grad_shard().fill_(v);
      full.narrow(0, layout.shard_begin(shard_rank), layout.shard_numel()).fill_(v);
    } else {
      const bool through_held = kind == 4;
      if (through_held) flat.settle_grad();
      const at::Tensor got = (through_held ? held : flat.grad_shard()).to(at::kCPU).to(at::kDouble);
      const at::Tensor want = full.narrow(0, layout.shard_begin(shard_rank), layout.shard_numel());
      ASSERT_TRUE(at::equal(got, want)) << "op " << op << (through_held ? " (the held tensor)" : "") << ": got "
                                        << got << " want " << want;
      ++checked;
    }
  }
  EXPECT_GT(checked, 50);
}

TEST(FlatParamGradients, APendingZeroUnderAnySequence) {
  int world = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  check_any_sequence(1);  // a rank alone at world size 1; replicas reducing otherwise
  check_any_sequence(world);
}

TEST(FlatParamGradients, OneShardGroupOfTheWholeWorld) {
  int world = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  check_gradient_path(world);
}
TEST(FlatParamGradients, ShardGroupsOfOneRank) { check_gradient_path(1); }

}  // namespace
}  // namespace shardtune
