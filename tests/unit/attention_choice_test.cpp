// Causal attention's kernel choice per shape (runtime/model/attention_choice.h): the policy under
// any sequence of shapes and timings, and on a GPU (skipped elsewhere) the choice made by timing
// both kernels, each held to float64 attention, values and gradients.
#include <ATen/Context.h>
#include <ATen/TensorOperators.h>
#include <ATen/ops/matmul.h>
#include <ATen/ops/ones.h>
#include <ATen/ops/randn.h>
#include <ATen/ops/softmax.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <map>
#include <random>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "runtime/model/attention_choice.h"
#include "runtime/model/fused_ops.h"
#include "runtime/model/llama.h"
#include "runtime/model/sdpa_version.h"

namespace shardtune::model {
namespace {

using Timing = AttentionChoice::Timing;

TEST(AttentionChoice, EachShapeIsTimedOnceAndTakesTheFaster) {
  AttentionChoice choice;
  int timed = 0;
  auto timing = [&](double without, double with) {
    return [&timed, without, with] {
      ++timed;
      return Timing{without, with};
    };
  };
  EXPECT_TRUE(choice.use_cudnn("a", timing(2.0, 1.0)));
  EXPECT_FALSE(choice.use_cudnn("b", timing(1.0, 2.0)));
  EXPECT_FALSE(choice.use_cudnn("c", timing(1.0, 1.0)));  // strictly faster to take it
  EXPECT_EQ(timed, 3);
  EXPECT_TRUE(choice.use_cudnn("a", timing(1.0, 2.0)));  // the first timing stands
  EXPECT_FALSE(choice.use_cudnn("b", timing(2.0, 1.0)));
  EXPECT_EQ(timed, 3);
  EXPECT_EQ(choice.choices(), (std::map<std::string, bool>{{"a", true}, {"b", false}, {"c", false}}));
}

TEST(AttentionChoice, AFailedTimingLeavesCudnnOutForThatShape) {
  AttentionChoice choice;
  EXPECT_FALSE(choice.use_cudnn("a", []() -> Timing { throw std::runtime_error("out of memory"); }));
  int timed = 0;
  EXPECT_FALSE(choice.use_cudnn("a", [&] { return ++timed, Timing{2.0, 1.0}; }));
  EXPECT_EQ(timed, 0);
}

// Any sequence of shapes and timings: a shape is timed at most once, only while fewer than
// kMaxShapes are chosen; its answer is always that first timing's verdict, and every shape met
// after the limit leaves cuDNN out untimed. So cuDNN holds plans for kMaxShapes shapes at most.
TEST(AttentionChoice, AnySequenceTimesAtMostTheFirstShapesOnce) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 200; ++trial) {
    AttentionChoice choice;
    const int distinct = 1 + static_cast<int>(rng() % (2 * AttentionChoice::kMaxShapes));
    std::map<std::string, int> timed;
    std::map<std::string, bool> verdict;
    std::vector<std::string> order;  // shapes in the order first met
    for (int call = 0; call < 60; ++call) {
      const std::string shape = "s" + std::to_string(rng() % distinct);
      const Timing t{1.0 + rng() % 3, 1.0 + rng() % 3};
      const bool first = std::find(order.begin(), order.end(), shape) == order.end();
      if (first) order.push_back(shape);
      const bool got = choice.use_cudnn(shape, [&] {
        ++timed[shape];
        return t;
      });
      if (first && timed.count(shape)) verdict[shape] = t.with_cudnn < t.without_cudnn;
      const size_t index = std::find(order.begin(), order.end(), shape) - order.begin();
      if (index < AttentionChoice::kMaxShapes) {
        ASSERT_EQ(timed[shape], 1) << shape;
        ASSERT_EQ(got, verdict[shape]) << shape;
      } else {
        ASSERT_FALSE(timed.count(shape)) << shape << " timed after " << AttentionChoice::kMaxShapes << " shapes";
        ASSERT_FALSE(got) << shape;
      }
    }
    ASSERT_LE(choice.choices().size(), AttentionChoice::kMaxShapes);
    ASSERT_EQ(choice.choices(), verdict);
  }
}

TEST(AttentionChoice, ThreadsMeetingOneShapeTimeItOnce) {
  AttentionChoice choice;
  std::atomic<int> timed{0};
  std::vector<std::thread> threads;
  std::atomic<int> yes{0};
  for (int i = 0; i < 8; ++i)
    threads.emplace_back([&] {
      if (choice.use_cudnn("a", [&] {
            ++timed;
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
            return Timing{2.0, 1.0};
          }))
        ++yes;
    });
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(timed.load(), 1);
  EXPECT_EQ(yes.load(), 8);
}

#if ST_SDPA_GQA

// Causal attention in float64 on the CPU, k and v repeated for the groups of query heads.
at::Tensor exact_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
  const int64_t groups = q.size(1) / k.size(1), t = q.size(2);
  auto repeat = [&](const at::Tensor& x) { return x.repeat_interleave(groups, 1); };
  at::Tensor scores = at::matmul(q, repeat(k).transpose(-2, -1)) / std::sqrt(static_cast<double>(q.size(3)));
  const at::Tensor allowed = at::ones({t, t}, at::TensorOptions().dtype(at::kBool)).tril();
  scores = scores.masked_fill(allowed.logical_not(), -INFINITY);
  return at::matmul(at::softmax(scores, -1), repeat(v));
}

double max_abs(const at::Tensor& t) { return t.abs().max().item<double>(); }

// On a GPU: each kernel choice gives float64's attention within bf16's bound, values and
// gradients; the timed choice names the shape once, whichever kernel won.
TEST(AttentionChoiceGpu, EveryChoiceIsAttention) {
  if (!at::hasCUDA()) GTEST_SKIP() << "no GPU visible";
  at::globalContext().setSDPUseCuDNN(false);  // as dist::bind_device leaves it
  const at::TensorOptions bf16 = at::TensorOptions().dtype(at::kBFloat16).device(at::kCUDA);
  const at::Tensor q = at::randn({2, 8, 256, 64}, bf16), k = at::randn({2, 2, 256, 64}, bf16),
                   v = at::randn({2, 2, 256, 64}, bf16), dout = at::randn({2, 8, 256, 64}, bf16);
  auto exact_leaf = [](const at::Tensor& x) { return x.to(at::kCPU, at::kDouble).requires_grad_(true); };
  const at::Tensor eq = exact_leaf(q), ek = exact_leaf(k), ev = exact_leaf(v);
  const at::Tensor exact = exact_attention(eq, ek, ev);
  exact.backward(dout.to(at::kCPU, at::kDouble));
  const Fusions saved = fusions();
  for (AttentionKernels kernels : {AttentionKernels::kNoCudnn, AttentionKernels::kCudnn, AttentionKernels::kMeasured}) {
    Fusions f = saved;
    f.attention = kernels;
    set_fusions(f);
    const at::Tensor lq = q.clone().requires_grad_(true), lk = k.clone().requires_grad_(true),
                     lv = v.clone().requires_grad_(true);
    const at::Tensor out = causal_attention(lq, lk, lv);
    out.backward(dout);
    // bf16's rounding of the output and of the probabilities before their product with v: 2^-8
    // relative each, with room for fp32 accumulation over 256 keys.
    const double bound = std::ldexp(1.0, -6);
    const int kind = static_cast<int>(kernels);
    EXPECT_LE(max_abs(out.to(at::kCPU, at::kDouble) - exact), bound * max_abs(exact)) << kind;
    EXPECT_LE(max_abs(lq.grad().to(at::kCPU, at::kDouble) - eq.grad()), 4 * bound * max_abs(eq.grad())) << kind;
    EXPECT_LE(max_abs(lk.grad().to(at::kCPU, at::kDouble) - ek.grad()), 4 * bound * max_abs(ek.grad())) << kind;
    EXPECT_LE(max_abs(lv.grad().to(at::kCPU, at::kDouble) - ev.grad()), 4 * bound * max_abs(ev.grad())) << kind;
  }
  set_fusions(saved);
  const std::map<std::string, bool> chosen = attention_choice().choices();
  ASSERT_EQ(chosen.size(), 1u);
  EXPECT_NE(chosen.begin()->first.find("q (2, 8, 256, 64) k (2, 2, 256, 64)"), std::string::npos)
      << chosen.begin()->first;
  EXPECT_FALSE(at::globalContext().userEnabledCuDNNSDP()) << "the flag is left as it was before each call";
}

#endif  // ST_SDPA_GQA

}  // namespace
}  // namespace shardtune::model
