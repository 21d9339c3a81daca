// shardtune's AdamW: the operation-at-a-time path against LibTorch's own torch::optim::AdamW
// (bitwise), the fused fp32 path against the exact (float64) step from the same state, and the
// sharding property the optimizer relies on: updating shards of a parameter separately equals
// updating it whole.
#include <ATen/ops/equal.h>
#include <gtest/gtest.h>
#include <torch/optim/adamw.h>

#include <cmath>
#include <random>

#include "runtime/fsdp/adamw.h"

namespace shardtune::fsdp {
namespace {

constexpr AdamWConfig kOps{0.9, 0.95, 1e-8, 0.1, /*fused=*/false};
constexpr AdamWConfig kFused{0.9, 0.95, 1e-8, 0.1, /*fused=*/true};

TEST(AdamW, MatchesLibTorchAdamW) {
  torch::manual_seed(3);
  at::Tensor ours = torch::randn({37, 5});
  at::Tensor theirs = ours.clone().requires_grad_(true);
  at::Tensor grad = torch::zeros_like(ours);
  AdamW opt(kOps);
  opt.add(ours, grad);
  EXPECT_FALSE(opt.fused(0));
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
  AdamW opt(kOps);
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

// Both paths: an element's update does not depend on the other elements of its tensor, so shards
// of unequal, unaligned lengths updated separately give the whole tensor's result bit for bit.
TEST(AdamW, ShardsUpdatedSeparatelyEqualTheWhole) {
  for (bool fused : {true, false}) {
    torch::manual_seed(4);
    const AdamWConfig config{0.9, 0.999, 1e-8, 0.01, fused};
    at::Tensor whole = torch::randn({100});
    at::Tensor parts = whole.clone();
    at::Tensor grad = torch::zeros({100});
    AdamW a(config), b(config);
    a.add(whole, grad);
    for (int64_t begin : {0, 33, 66}) b.add(parts.narrow(0, begin, begin == 66 ? 34 : 33), grad.narrow(0, begin, begin == 66 ? 34 : 33));
    EXPECT_EQ(a.fused(0), fused);
    for (int step = 0; step < 10; ++step) {
      grad.copy_(torch::randn({100}));
      a.step(1e-2);
      b.step(1e-2);
    }
    EXPECT_TRUE(at::equal(whole, parts)) << "fused " << fused;
  }
}

// The fused fp32 step against the exact step from the same state (float64 arithmetic on the
// state's fp32 values), over random sizes, hyper-parameters, step counts and magnitudes. Bounds,
// with u = 2^-24 (fp32's unit roundoff), from the roundings each result goes through (the
// constants' own roundings to fp32 included):
//   m: 4u·(β1|m| + (1−β1)|g|)     v: 6u·(β2|v| + (1−β2)g²)
//   p: 3u·|p| + 8u·|update|, the update computed from the step's m and v
TEST(AdamW, FusedStepIsTheExactStepWithinItsRoundings) {
  std::mt19937_64 rng(11);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  const double u = std::ldexp(1.0, -24);
  for (int trial = 0; trial < 300; ++trial) {
    const int64_t n = 1 + static_cast<int64_t>(unit(rng) * 700);
    const AdamWConfig config{0.8 + 0.19 * unit(rng), 0.9 + 0.0999 * unit(rng), std::pow(10.0, -10 + 4 * unit(rng)),
                             trial % 2 ? 0.1 * unit(rng) : 0.0, true};
    const double lr = std::pow(10.0, -5 + 4 * unit(rng));
    const int64_t prior = static_cast<int64_t>(unit(rng) * 2000);
    const double scale = std::pow(10.0, -8 + 9 * unit(rng));
    at::Tensor p = torch::randn({n}), g = torch::randn({n}) * scale;
    AdamW opt(config);
    opt.add(p, g);
    ASSERT_TRUE(opt.fused(0));
    opt.exp_avg(0).copy_(torch::randn({n}) * scale);
    opt.exp_avg_sq(0).copy_(torch::rand({n}) * scale * scale);
    opt.set_param_step(0, prior);
    const at::Tensor p0 = p.to(at::kDouble), g0 = g.to(at::kDouble), m0 = opt.exp_avg(0).to(at::kDouble),
                     v0 = opt.exp_avg_sq(0).to(at::kDouble);
    opt.step(lr);
    ASSERT_EQ(opt.param_step(0), prior + 1);
    const double step = static_cast<double>(prior + 1);
    const double b1 = config.beta1, b2 = config.beta2;
    const at::Tensor m1 = opt.exp_avg(0).to(at::kDouble), v1 = opt.exp_avg_sq(0).to(at::kDouble);
    const at::Tensor m_exact = m0 * b1 + g0 * (1 - b1);
    const at::Tensor v_exact = v0 * b2 + g0 * g0 * (1 - b2);
    const at::Tensor update = -lr / (1 - std::pow(b1, step)) * m1 /
                              (v1.sqrt() / std::sqrt(1 - std::pow(b2, step)) + config.eps);
    const at::Tensor p_exact = p0 * (1 - lr * config.weight_decay) + update;
    const auto within = [&](const at::Tensor& got, const at::Tensor& exact, const at::Tensor& bound, const char* what) {
      const at::Tensor excess = (got - exact).abs() - bound;
      EXPECT_LE(excess.max().item<double>(), 0.0)
          << what << ", trial " << trial << ": error over its bound at element " << excess.argmax().item<int64_t>();
    };
    within(m1, m_exact, 4 * u * (b1 * m0.abs() + (1 - b1) * g0.abs()), "exp_avg");
    within(v1, v_exact, 6 * u * (b2 * v0 + (1 - b2) * g0 * g0), "exp_avg_sq");
    within(p.to(at::kDouble), p_exact, 3 * u * p0.abs() + 8 * u * update.abs(), "param");
  }
}

// Over many steps the fused path stays with LibTorch's AdamW to fp32's precision.
TEST(AdamW, FusedStaysWithLibTorchAdamW) {
  torch::manual_seed(6);
  at::Tensor ours = torch::randn({4099});
  at::Tensor theirs = ours.clone().requires_grad_(true);
  at::Tensor grad = torch::zeros_like(ours);
  AdamW opt(kFused);
  opt.add(ours, grad);
  torch::optim::AdamW ref({theirs}, torch::optim::AdamWOptions(1e-3).betas({0.9, 0.95}).eps(1e-8).weight_decay(0.1));
  for (int step = 0; step < 30; ++step) {
    const at::Tensor g = torch::randn({4099});
    grad.copy_(g);
    opt.step(1e-3);
    theirs.mutable_grad() = g.clone();
    ref.step();
  }
  // 30 updates of up to lr each, rounded at every step: within a few units of fp32 at |p| ~ 1.
  const double diff = (ours - theirs.detach()).abs().max().item<double>();
  EXPECT_LT(diff, 30 * 8 * std::ldexp(1.0, -24) * 4) << diff;
}

// bf16 gradients are widened exactly: the same step as with their fp32 values.
TEST(AdamW, FusedBf16GradientsEqualTheirFp32Values) {
  torch::manual_seed(7);
  at::Tensor a = torch::randn({1001}), b = a.clone();
  const at::Tensor g16 = torch::randn({1001}).to(at::kBFloat16), g32 = g16.to(at::kFloat);
  AdamW x(kFused), y(kFused);
  x.add(a, g16);
  y.add(b, g32);
  ASSERT_TRUE(x.fused(0));
  for (int step = 0; step < 3; ++step) {
    x.step(1e-2);
    y.step(1e-2);
  }
  EXPECT_TRUE(at::equal(a, b));
  EXPECT_TRUE(at::equal(x.exp_avg_sq(0), y.exp_avg_sq(0)));
}

// A step's grad_scale (clipping's coefficient) is the step from the gradients multiplied by it in
// fp32 first, as a separate clipping pass makes them: bitwise, on every path with fp32 gradients
// (the fused pass takes it in its own multiply; the others scale the gradient), and on the fused
// pass with bf16 gradients, which it widens before the multiply (a separate pass would round the
// product to bf16).
TEST(AdamW, GradScaleEqualsGradientsScaledFirst) {
  const AdamWConfig eight_bit{0.9, 0.95, 1e-8, 0.1, /*fused=*/true, /*blockwise_8bit=*/true};
  for (const AdamWConfig& config : {kFused, kOps, eight_bit})
    for (const at::ScalarType grad_dtype : {at::kFloat, at::kBFloat16}) {
      if (grad_dtype == at::kBFloat16 && (!config.fused || config.blockwise_8bit)) continue;
      torch::manual_seed(9);
      const int64_t n = 5000;  // more than one 8-bit block, with a partial last one
      at::Tensor a = torch::randn({n}), b = a.clone();
      at::Tensor g = torch::zeros({n}, grad_dtype), scaled = torch::zeros({n});
      AdamW x(config), y(config);
      x.add(a, g);
      y.add(b, scaled);
      for (int step = 0; step < 4; ++step) {
        const double coef = step == 2 ? 1.0 : 0.3 / (step + 1);  // 1: no clipping this step
        g.copy_(torch::randn({n}) * 3);
        scaled.copy_(g.to(at::kFloat)).mul_(coef);
        x.step(1e-2, nullptr, coef);
        y.step(1e-2);
      }
      const std::string which = std::string(config.blockwise_8bit ? "8-bit" : config.fused ? "fused" : "ops") +
                                (grad_dtype == at::kFloat ? ", fp32 gradients" : ", bf16 gradients");
      EXPECT_TRUE(at::equal(a, b)) << which << ": " << (a - b).abs().max().item<double>();
      if (!config.blockwise_8bit) {
        EXPECT_TRUE(at::equal(x.exp_avg_sq(0), y.exp_avg_sq(0))) << which;
      }
    }
}

// With an observer the fused path updates a piece at a time: the same values, and each parameter's
// pieces reported in order, covering it once, each already holding its final value when reported.
TEST(AdamW, FusedObservedPiecesCoverEachParameterOnce) {
  torch::manual_seed(8);
  const int64_t n = 3 * AdamW::kObservedPieceElements + 17;
  at::Tensor a = torch::randn({n}), b = a.clone(), c = torch::randn({5}), d = c.clone();
  const at::Tensor g = torch::randn({n}), h = torch::randn({5});
  AdamW observed(kFused), plain(kFused);
  observed.add(a, g);
  observed.add(c, h);
  plain.add(b, g);
  plain.add(d, h);
  plain.step(1e-3);
  std::vector<int64_t> covered(2, 0);
  int64_t wrong = 0;
  observed.step(1e-3, [&](size_t param, int64_t start, int64_t count) {
    EXPECT_EQ(start, covered.at(param));
    covered[param] += count;
    const at::Tensor& mine = param == 0 ? a : c;
    const at::Tensor& want = param == 0 ? b : d;
    if (!at::equal(mine.narrow(0, start, count), want.narrow(0, start, count))) ++wrong;
  });
  EXPECT_EQ(covered, (std::vector<int64_t>{n, 5}));
  EXPECT_EQ(wrong, 0);
  EXPECT_TRUE(at::equal(a, b));
}

// The fused pass writes through the tensors' data, yet their version counters move on as an
// in-place operation's do: FSDP tells a stale gathered copy of a shard by its version, and a
// checkpoint a stale checksum of a moment.
TEST(AdamW, FusedStepMovesVersionCounters) {
  for (bool fused : {true, false}) {
    at::Tensor p = torch::randn({10}), g = torch::randn({10});
    AdamW opt({0.9, 0.95, 1e-8, 0.1, fused});
    opt.add(p, g);
    const auto before = std::vector<int64_t>{p._version(), opt.exp_avg(0)._version(), opt.exp_avg_sq(0)._version()};
    opt.step(1e-2);
    EXPECT_GT(p._version(), before[0]) << "fused " << fused;
    EXPECT_GT(opt.exp_avg(0)._version(), before[1]) << "fused " << fused;
    EXPECT_GT(opt.exp_avg_sq(0)._version(), before[2]) << "fused " << fused;
  }
}

// The default is the fused pass.
TEST(AdamW, DefaultIsFused) {
  AdamW opt({});
  opt.add(torch::randn({4}), torch::randn({4}));
  EXPECT_TRUE(opt.fused(0));
}

// Other dtypes take an operation at a time, as LibTorch's AdamW.
TEST(AdamW, Float64StateTakesTheOperationPath) {
  at::Tensor p = torch::randn({9}, at::kDouble), g = torch::randn({9}, at::kDouble);
  at::Tensor theirs = p.clone().requires_grad_(true);
  AdamW opt(kFused);
  opt.add(p, g);
  EXPECT_FALSE(opt.fused(0));
  opt.step(1e-2);
  torch::optim::AdamW ref({theirs}, torch::optim::AdamWOptions(1e-2).betas({0.9, 0.95}).eps(1e-8).weight_decay(0.1));
  theirs.mutable_grad() = g.clone();
  ref.step();
  EXPECT_TRUE(at::equal(p, theirs.detach()));
}

}  // namespace
}  // namespace shardtune::fsdp
