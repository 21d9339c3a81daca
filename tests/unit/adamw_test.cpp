// shardtune's AdamW against LibTorch's own torch::optim::AdamW, and the sharding property the
// optimizer relies on: updating shards of a parameter separately equals updating it whole.
#include <ATen/ops/equal.h>
#include <gtest/gtest.h>
#include <torch/optim/adamw.h>

#include "runtime/fsdp/adamw.h"

namespace shardtune::fsdp {
namespace {

TEST(AdamW, MatchesLibTorchAdamW) {
  torch::manual_seed(3);
  at::Tensor ours = torch::randn({37, 5});
  at::Tensor theirs = ours.clone().requires_grad_(true);
  at::Tensor grad = torch::zeros_like(ours);
  AdamW opt({0.9, 0.95, 1e-8, 0.1});
  opt.add(ours, grad);
  torch::optim::AdamW ref({theirs}, torch::optim::AdamWOptions(3e-3).betas({0.9, 0.95}).eps(1e-8).weight_decay(0.1));
  for (int step = 0; step < 25; ++step) {
    const at::Tensor g = torch::randn({37, 5}) * (step % 3 == 0 ? 1e-6 : 1.0);
    grad.copy_(g);
    opt.step(3e-3);
    theirs.mutable_grad() = g.clone();
    ref.step();
  }
  EXPECT_TRUE(at::equal(ours, theirs.detach())) << (ours - theirs.detach()).abs().max();
  EXPECT_EQ(opt.step_count(), 25);
  EXPECT_EQ(opt.state_bytes(), 2 * 37 * 5 * 4);
}

// A tensor larger than one piece is updated piece by piece (bounded temporaries): still exactly
// what LibTorch's AdamW computes on it whole, the last, shorter piece included.
TEST(AdamW, ATensorOfSeveralPiecesMatchesLibTorchAdamW) {
  torch::manual_seed(5);
  const int64_t n = AdamW::kPieceElements + 1001;
  at::Tensor ours = torch::randn({n});
  at::Tensor theirs = ours.clone().requires_grad_(true);
  at::Tensor grad = torch::zeros_like(ours);
  AdamW opt({0.9, 0.95, 1e-8, 0.1});
  opt.add(ours, grad);
  torch::optim::AdamW ref({theirs}, torch::optim::AdamWOptions(1e-3).betas({0.9, 0.95}).eps(1e-8).weight_decay(0.1));
  for (int step = 0; step < 3; ++step) {
    const at::Tensor g = torch::randn({n});
    grad.copy_(g);
    opt.step(1e-3);
    theirs.mutable_grad() = g;
    ref.step();
  }
  EXPECT_TRUE(at::equal(ours, theirs.detach())) << (ours - theirs.detach()).abs().max();
}

TEST(AdamW, ShardsUpdatedSeparatelyEqualTheWhole) {
  torch::manual_seed(4);
  at::Tensor whole = torch::randn({100});
  at::Tensor parts = whole.clone();
  at::Tensor grad = torch::zeros({100});
  AdamW a({0.9, 0.999, 1e-8, 0.01}), b({0.9, 0.999, 1e-8, 0.01});
  a.add(whole, grad);
  for (int64_t begin : {0, 33, 66}) b.add(parts.narrow(0, begin, begin == 66 ? 34 : 33), grad.narrow(0, begin, begin == 66 ? 34 : 33));
  for (int step = 0; step < 10; ++step) {
    grad.copy_(torch::randn({100}));
    a.step(1e-2);
    b.step(1e-2);
  }
  EXPECT_TRUE(at::equal(whole, parts));
}

}  // namespace
}  // namespace shardtune::fsdp
