// The fused operations' autograd functions (runtime/model/fused_ops), run through the kernels' host
// references on fp32 CPU tensors: the same functions, saved tensors and views the GPU runs. Each
// result, value and gradient, is held to ATen's spelling of the operation in float64, and a whole
// model trained through them to the float64 model.
#include <ATen/TensorOperators.h>
#include <ATen/core/grad_mode.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/equal.h>
#include <ATen/ops/full.h>
#include <ATen/ops/randn.h>
#include <ATen/ops/randint.h>
#include <ATen/ops/sum.h>
#include <gtest/gtest.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/function.h>

#include <cmath>
#include <functional>
#include <map>
#include <set>
#include <string>

#include "runtime/model/fused_ops.h"
#include "runtime/model/init.h"
#include "runtime/model/kernel_calls.h"
#include "runtime/model/llama.h"
#include "runtime/model/loss.h"

namespace shardtune::model {
namespace {

constexpr double kU = 1.0 / (1 << 24);  // fp32 unit roundoff

// Fusions on for fp32 CPU tensors for one test, off again after it.
class Fused : public ::testing::Test {
 protected:
  void SetUp() override {
    Fusions f;
    f.host_reference = true;
    set_fusions(f);
  }
  void TearDown() override { set_fusions(Fusions{}); }
};

void with_aten(const std::function<void()>& fn) {
  const Fusions saved = fusions();
  Fusions off;
  off.rmsnorm = off.rope = off.swiglu = off.cross_entropy = off.gqa_attention = off.joined_gate_up = false;
  off.joined_qkv = off.residual_norm = false;
  set_fusions(off);
  fn();
  set_fusions(saved);
}

std::string grad_fn_name(const at::Tensor& t) { return t.grad_fn() ? t.grad_fn()->name() : "none"; }

double max_abs(const at::Tensor& t) { return t.abs().max().item<double>(); }
double max_diff(const at::Tensor& a, const at::Tensor& b) {
  return (a.to(at::kDouble) - b.to(at::kDouble)).abs().max().item<double>();
}

// An operation through the fused path in fp32 and through ATen in float64 on the same inputs;
// each output and input gradient (for a random output gradient) within bound * max|exact|.
void check(const std::string& function, const std::vector<at::Tensor>& inputs,
           const std::function<at::Tensor(const std::vector<at::Tensor>&)>& op, double bound) {
  std::vector<at::Tensor> f32, f64;
  for (const at::Tensor& t : inputs) {
    f32.push_back(t.to(at::kFloat).detach().requires_grad_(true));
    f64.push_back(t.to(at::kDouble).detach().requires_grad_(true));
  }
  const at::Tensor y = op(f32);
  ASSERT_NE(grad_fn_name(y).find(function), std::string::npos) << grad_fn_name(y) << ": not the fused path";
  at::Tensor exact;
  with_aten([&] { exact = op(f64); });
  EXPECT_LE(max_diff(y, exact), bound * max_abs(exact)) << function << " forward";
  const at::Tensor dy = at::randn(y.sizes(), at::kDouble);
  (y * dy.to(at::kFloat)).sum().backward();
  (exact * dy).sum().backward();
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!f64[i].grad().defined()) continue;
    ASSERT_TRUE(f32[i].grad().defined()) << function << " input " << i;
    EXPECT_LE(max_diff(f32[i].grad(), f64[i].grad()), bound * max_abs(f64[i].grad())) << function << " grad " << i;
  }
}

TEST_F(Fused, RmsNormValuesAndGradientsWithinBoundsOfFloat64) {
  for (int64_t n : {7, 64, 1031}) {  // n = 1 (a gradient that cancels to ~0): kernels_reference_test
    const at::Tensor x = at::randn({3, 5, n}, at::kDouble) * 3;
    const at::Tensor w = 1 + at::randn({n}, at::kDouble) * 0.2;
    // A row of n terms: sums round within n*u; the rest a few roundings.
    check("RmsNormFunction", {x, w}, [](const std::vector<at::Tensor>& t) { return rms_norm(t[0], t[1], 1e-5); },
          (16.0 + static_cast<double>(n)) * kU * 15);  // dw sums 15 rows
  }
}

// The residual stream at a norm: (x + delta, or x alone, and its norm) from one function, whose
// backward adds the sum's gradient inside the norm's kernel. Each output and input gradient within
// the norm's bounds of float64, with the loss reaching both outputs, the norm alone, or the sum alone.
TEST_F(Fused, ResidualNormValuesAndGradientsWithinBoundsOfFloat64) {
  for (int64_t n : {7, 64, 1031}) {
    for (bool add : {false, true}) {
      for (int reaches : {0, 1, 2}) {  // both outputs, the norm only, the sum only
        SCOPED_TRACE(testing::Message() << "n " << n << (add ? ", x + delta" : ", x") << ", reaches " << reaches);
        const at::Tensor x = at::randn({3, 5, n}, at::kDouble) * 3, delta = at::randn({3, 5, n}, at::kDouble);
        const at::Tensor w = 1 + at::randn({n}, at::kDouble) * 0.2;
        const at::Tensor g_sum = at::randn({3, 5, n}, at::kDouble), g_norm = at::randn({3, 5, n}, at::kDouble);
        auto leaf = [](const at::Tensor& t, at::ScalarType dt) { return t.to(dt).detach().requires_grad_(true); };
        const at::Tensor x32 = leaf(x, at::kFloat), d32 = leaf(delta, at::kFloat), w32 = leaf(w, at::kFloat);
        const at::Tensor x64 = leaf(x, at::kDouble), d64 = leaf(delta, at::kDouble), w64 = leaf(w, at::kDouble);
        const ResidualNorm fused = residual_rms_norm(x32, add ? d32 : at::Tensor(), w32, 1e-5);
        ASSERT_EQ(grad_fn_name(fused.normed).find("ResidualNormFunction") != std::string::npos, true)
            << grad_fn_name(fused.normed);
        ASSERT_EQ(fused.sum.grad_fn().get(), fused.normed.grad_fn().get()) << "one function gives both";
        ResidualNorm exact;
        with_aten([&] { exact = residual_rms_norm(x64, add ? d64 : at::Tensor(), w64, 1e-5); });
        const double bound = (16.0 + static_cast<double>(n)) * kU * 15;  // dw sums 15 rows
        // The inputs' roundings to fp32 and the sum's own.
        EXPECT_LE(max_diff(fused.sum, exact.sum), 3 * kU * (max_abs(x) + max_abs(delta)));
        EXPECT_LE(max_diff(fused.normed, exact.normed), bound * max_abs(exact.normed));
        auto loss = [&](const ResidualNorm& r, at::ScalarType dt) {
          if (reaches == 1) return (r.normed * g_norm.to(dt)).sum();
          if (reaches == 2) return (r.sum * g_sum.to(dt)).sum();
          return (r.sum * g_sum.to(dt)).sum() + (r.normed * g_norm.to(dt)).sum();
        };
        loss(fused, at::kFloat).backward();
        loss(exact, at::kDouble).backward();
        EXPECT_LE(max_diff(x32.grad(), x64.grad()), bound * max_abs(x64.grad()));
        if (add) {
          EXPECT_LE(max_diff(d32.grad(), d64.grad()), bound * max_abs(d64.grad()));
        } else {
          EXPECT_FALSE(d32.grad().defined());
        }
        if (reaches == 2) {
          EXPECT_FALSE(w32.grad().defined() && max_abs(w32.grad()) > 0) << "the weight's gradient without the norm";
        } else {
          EXPECT_LE(max_diff(w32.grad(), w64.grad()), bound * max_abs(w64.grad()));
        }
      }
    }
  }
}

// Each (function, input) of `t`'s graph that two or more edges lead to: a gradient autograd sums
// there with an addition of its own.
int summed_gradients(const at::Tensor& t) {
  std::map<std::pair<torch::autograd::Node*, uint32_t>, int> edges;
  std::set<torch::autograd::Node*> seen;
  std::vector<torch::autograd::Node*> stack{t.grad_fn().get()};
  while (!stack.empty()) {
    torch::autograd::Node* node = stack.back();
    stack.pop_back();
    if (node == nullptr || !seen.insert(node).second) continue;
    for (const torch::autograd::Edge& e : node->next_edges()) {
      if (!e.function) continue;
      ++edges[{e.function.get(), e.input_nr}];
      stack.push_back(e.function.get());
    }
  }
  int summed = 0;
  for (const auto& [target, count] : edges) summed += count > 1 ? 1 : 0;
  return summed;
}

// A block whose weights lie as FSDP leaves them (q, k, v adjacent; gate and up adjacent): fused, no
// gradient of its backward is the sum of two, the residual stream's included (each norm adds it in
// its own kernel); spelled as ATen's operations, the residual stream's two junctions sum theirs.
TEST_F(Fused, ABlocksBackwardSumsNoGradientWithAnAdditionOfItsOwn) {
  const int64_t hidden = 16, heads = 4, kv_heads = 2, d = 4, inter = 24, b = 2, t = 5;
  const at::Tensor flat = at::randn({(2 * heads + 2 * kv_heads) * d * hidden + 3 * inter * hidden}) * 0.3;
  DecoderLayer layer;
  int64_t offset = 0;
  auto take = [&](Linear& l, int64_t rows, int64_t cols) {
    l.weight = flat.narrow(0, offset, rows * cols).view({rows, cols}).requires_grad_(true);
    offset += rows * cols;
  };
  take(layer.self_attn.q_proj, heads * d, hidden);
  take(layer.self_attn.k_proj, kv_heads * d, hidden);
  take(layer.self_attn.v_proj, kv_heads * d, hidden);
  take(layer.self_attn.o_proj, hidden, heads * d);
  take(layer.mlp.gate_proj, inter, hidden);
  take(layer.mlp.up_proj, inter, hidden);
  take(layer.mlp.down_proj, hidden, inter);
  layer.self_attn.num_heads = heads;
  layer.self_attn.num_kv_heads = kv_heads;
  layer.self_attn.head_dim = d;
  for (RMSNorm* norm : {&layer.input_layernorm, &layer.post_attention_layernorm})
    *norm = {(1 + at::randn({hidden}) * 0.1).requires_grad_(true), 1e-6};
  const at::Tensor angle = at::randn({b, t, d / 2}) * 5;
  const at::Tensor a = at::cat({angle, angle}, -1);
  const RopeTables rope{a.cos(), a.sin()};
  auto summed = [&] {
    const at::Tensor x = at::randn({b, t, hidden}).requires_grad_(true);
    return summed_gradients(layer.forward(x, rope, AttentionMask{}));
  };
  EXPECT_EQ(summed(), 0);
  with_aten([&] { EXPECT_GE(summed(), 2); });
  Fusions no_residual = fusions();
  no_residual.residual_norm = false;
  set_fusions(no_residual);
  EXPECT_EQ(summed(), 2) << "the residual stream's two junctions";
}

TEST_F(Fused, RotaryValuesAndGradientsWithinBoundsOfFloat64) {
  for (int64_t d : {2, 8, 130}) {
    const at::Tensor x = at::randn({2, 5, 3, d}, at::kDouble);
    const at::Tensor angle = at::randn({2, 5, d / 2}, at::kDouble) * 10;
    const at::Tensor a = at::cat({angle, angle}, -1);
    const at::Tensor cos = a.cos().to(at::kFloat), sin = a.sin().to(at::kFloat);
    check("RopeFunction", {x},
          [&](const std::vector<at::Tensor>& t) {
            const at::ScalarType dt = t[0].scalar_type();
            return rotary(t[0], RopeTables{cos.to(dt), sin.to(dt)});
          },
          8 * kU);
  }
}

TEST_F(Fused, SwigluValuesAndGradientsWithinBoundsOfFloat64) {
  const at::Tensor g = at::randn({4, 3, 257}, at::kDouble) * 4, u = at::randn({4, 3, 257}, at::kDouble);
  check("SwigluFunction", {g, u}, [](const std::vector<at::Tensor>& t) { return swiglu(t[0], t[1]); }, 16 * kU);
}

// Gate and up in one product: the kernel reads both halves in place and writes both gradients
// into one tensor, within the separate SwiGLU's bounds (the same arithmetic an element).
TEST_F(Fused, SwigluJoinedValuesAndGradientsWithinBoundsOfFloat64) {
  for (const int64_t cols : {1, 7, 257}) {
    const at::Tensor gu = at::randn({4, 3, 2 * cols}, at::kDouble) * 3;
    check("SwigluJoinedFunction", {gu}, [](const std::vector<at::Tensor>& t) { return swiglu_joined(t[0]); }, 16 * kU);
  }
}

// Whether autograd's graph under `t` has a node of this name.
bool graph_has(const at::Tensor& t, const std::string& name) {
  std::vector<torch::autograd::Node*> stack{t.grad_fn().get()};
  while (!stack.empty()) {
    torch::autograd::Node* node = stack.back();
    stack.pop_back();
    if (node == nullptr) continue;
    if (node->name().find(name) != std::string::npos) return true;
    for (const torch::autograd::Edge& e : node->next_edges()) stack.push_back(e.function.get());
  }
  return false;
}

// Gate's and up's weights as FSDP leaves them, views of one buffer one after the other, each its
// own leaf: seen as one weight without a copy, the MLP makes one product of them and its gradient
// reaches each leaf as its rows. Against the MLP of separate float64 weights.
TEST_F(Fused, AdjacentGateAndUpAreOneProduct) {
  const int64_t hidden = 12, inter = 20;
  const at::Tensor base = at::randn({3 * inter * hidden}) * 0.3;  // gate, up, down
  Mlp fused;
  fused.gate_proj.weight = base.narrow(0, 0, inter * hidden).view({inter, hidden}).requires_grad_(true);
  fused.up_proj.weight = base.narrow(0, inter * hidden, inter * hidden).view({inter, hidden}).requires_grad_(true);
  fused.down_proj.weight = base.narrow(0, 2 * inter * hidden, inter * hidden).view({hidden, inter}).requires_grad_(true);
  Mlp exact;
  for (auto [from, to] : {std::pair{&fused.gate_proj, &exact.gate_proj}, std::pair{&fused.up_proj, &exact.up_proj},
                          std::pair{&fused.down_proj, &exact.down_proj}})
    to->weight = from->weight.detach().to(at::kDouble).requires_grad_(true);
  const at::Tensor joined = joined_rows(fused.gate_proj.weight, fused.up_proj.weight);
  ASSERT_TRUE(joined.defined());
  EXPECT_EQ(joined.data_ptr(), fused.gate_proj.weight.data_ptr()) << "a view, not a copy";
  EXPECT_TRUE(at::equal(joined, at::cat({fused.gate_proj.weight, fused.up_proj.weight})));
  EXPECT_FALSE(joined_rows(fused.up_proj.weight, fused.gate_proj.weight).defined()) << "up lies after gate";
  EXPECT_FALSE(joined_rows(fused.gate_proj.weight, fused.down_proj.weight).defined()) << "not adjacent, nor as wide";
  const at::Tensor shorter = base.narrow(0, 0, (inter - 1) * hidden).view({inter - 1, hidden});
  const at::Tensor after = base.narrow(0, (inter - 1) * hidden, inter * hidden).view({inter, hidden});
  EXPECT_FALSE(joined_rows(shorter, after).defined()) << "adjacent, but the product's halves would not be theirs";

  const at::Tensor x = at::randn({2, 5, hidden}, at::kDouble);
  const at::Tensor y = fused.forward(x.to(at::kFloat));
  EXPECT_TRUE(graph_has(y, "JoinedRowsFunction"));
  EXPECT_TRUE(graph_has(y, "SwigluJoinedFunction"));
  at::Tensor y64;
  with_aten([&] { y64 = exact.forward(x); });
  EXPECT_LE(max_diff(y, y64), 1e-5 * max_abs(y64));
  const at::Tensor dy = at::randn(y.sizes(), at::kDouble);
  (y * dy.to(at::kFloat)).sum().backward();
  (y64 * dy).sum().backward();
  for (auto [mine, want] : {std::pair{&fused.gate_proj, &exact.gate_proj}, std::pair{&fused.up_proj, &exact.up_proj},
                            std::pair{&fused.down_proj, &exact.down_proj}}) {
    ASSERT_TRUE(mine->weight.grad().defined());
    EXPECT_LE(max_diff(mine->weight.grad(), want->weight.grad()), 1e-5 * max_abs(want->weight.grad()));
  }
  // Turned off: two products.
  Fusions off = fusions();
  off.joined_gate_up = false;
  set_fusions(off);
  EXPECT_FALSE(graph_has(fused.forward(x.to(at::kFloat)), "JoinedRowsFunction"));
}

// q's, k's and v's weights as FSDP leaves them, views of one buffer one after the other, each its
// own leaf: one product whose q and k columns the RoPE kernel reads in place and whose gradient
// comes back side by side, each leaf's its rows. The attention against the one of separate
// float64 weights, with plain causal attention and with packed rows (per-document attention).
TEST_F(Fused, AdjacentQkvAreOneProduct) {
  const int64_t hidden = 24, heads = 4, kv_heads = 2, d = 6, b = 2, t = 7;
  // q, k, v and o in one fp32 buffer, as a flat parameter's leaves.
  const at::Tensor flat = at::randn({(2 * heads + 2 * kv_heads) * d * hidden}) * 0.3;
  Attention fused;
  int64_t offset = 0;
  auto take = [&](Linear& l, int64_t rows, int64_t cols) {
    l.weight = flat.narrow(0, offset, rows * cols).view({rows, cols}).requires_grad_(true);
    offset += rows * cols;
  };
  take(fused.q_proj, heads * d, hidden);
  take(fused.k_proj, kv_heads * d, hidden);
  take(fused.v_proj, kv_heads * d, hidden);
  take(fused.o_proj, hidden, heads * d);
  Attention exact = fused;
  for (auto [from, to] : {std::pair{&fused.q_proj, &exact.q_proj}, std::pair{&fused.k_proj, &exact.k_proj},
                          std::pair{&fused.v_proj, &exact.v_proj}, std::pair{&fused.o_proj, &exact.o_proj}})
    to->weight = from->weight.detach().to(at::kDouble).requires_grad_(true);
  fused.num_heads = exact.num_heads = heads;
  fused.num_kv_heads = exact.num_kv_heads = kv_heads;
  fused.head_dim = exact.head_dim = d;
  const at::Tensor angle = at::randn({b, t, d / 2}, at::kDouble) * 5;
  const at::Tensor a = at::cat({angle, angle}, -1);
  const RopeTables rope32{a.cos().to(at::kFloat), a.sin().to(at::kFloat)}, rope64{a.cos(), a.sin()};
  AttentionMask packed;
  packed.rows = {{{0, 3}, {3, 7}}, {{0, 7}}};
  for (const AttentionMask& mask : {AttentionMask{}, packed}) {
    for (Linear* l : {&fused.q_proj, &fused.k_proj, &fused.v_proj, &fused.o_proj, &exact.q_proj, &exact.k_proj,
                      &exact.v_proj, &exact.o_proj})
      l->weight.mutable_grad().reset();
    const at::Tensor x = at::randn({b, t, hidden}, at::kDouble);
    const at::Tensor x32 = x.to(at::kFloat).requires_grad_(true), x64 = x.clone().requires_grad_(true);
    const at::Tensor y = fused.forward(x32, rope32, mask, DropoutSeed{});
    EXPECT_TRUE(graph_has(y, "QkvRopeFunction"));
    EXPECT_TRUE(graph_has(y, "JoinedRowsFunction"));
    at::Tensor y64;
    with_aten([&] { y64 = exact.forward(x64, rope64, mask, DropoutSeed{}); });
    // Products of 24 terms, RoPE's two, softmax over 7 and the output product: a few dozen u.
    const double bound = 64 * kU;
    EXPECT_LE(max_diff(y, y64), bound * max_abs(y64));
    const at::Tensor dy = at::randn(y.sizes(), at::kDouble);
    (y * dy.to(at::kFloat)).sum().backward();
    (y64 * dy).sum().backward();
    EXPECT_LE(max_diff(x32.grad(), x64.grad()), bound * max_abs(x64.grad()));
    for (auto [mine, want] : {std::pair{&fused.q_proj, &exact.q_proj}, std::pair{&fused.k_proj, &exact.k_proj},
                              std::pair{&fused.v_proj, &exact.v_proj}, std::pair{&fused.o_proj, &exact.o_proj}}) {
      ASSERT_TRUE(mine->weight.grad().defined());
      EXPECT_LE(max_diff(mine->weight.grad(), want->weight.grad()), bound * max_abs(want->weight.grad()));
    }
  }
  // Not adjacent, or in another order: three products.
  EXPECT_FALSE(joined_qkv(at::randn({b, t, hidden}), fused.k_proj.weight, fused.q_proj.weight, fused.v_proj.weight,
                          rope32, heads, kv_heads)
                   .q.defined());
  EXPECT_FALSE(joined_qkv(at::randn({b, t, hidden}), fused.q_proj.weight, fused.k_proj.weight, fused.o_proj.weight,
                          rope32, heads, kv_heads)
                   .q.defined());
  // Turned off: three products, and the rotation apart.
  Fusions off = fusions();
  off.joined_qkv = false;
  set_fusions(off);
  const at::Tensor y = fused.forward(at::randn({b, t, hidden}), rope32, AttentionMask{}, DropoutSeed{});
  EXPECT_FALSE(graph_has(y, "QkvRopeFunction"));
  EXPECT_TRUE(graph_has(y, "RopeFunction"));
}

// Non-contiguous inputs (a transposed view) are made contiguous, not misread.
TEST_F(Fused, NonContiguousInputsGiveTheContiguousResult) {
  const at::Tensor x = at::randn({6, 4}, at::kFloat).t();  // (4, 6), strides (1, 4)
  const at::Tensor w = at::randn({6}, at::kFloat);
  EXPECT_TRUE(rms_norm(x, w, 1e-6).equal(rms_norm(x.contiguous(), w, 1e-6)));
  EXPECT_TRUE(swiglu(x, x * 2).equal(swiglu(x.contiguous(), x.contiguous() * 2)));
}

// What the kernels do not take (fp64 here; mismatched dtypes) goes through ATen.
TEST_F(Fused, OtherDtypesFallBackToAten) {
  const at::Tensor x = at::randn({3, 8}, at::kDouble).requires_grad_(true);
  const at::Tensor w = at::randn({8}, at::kDouble).requires_grad_(true);
  EXPECT_EQ(grad_fn_name(rms_norm(x, w, 1e-6)).find("RmsNormFunction"), std::string::npos);
  EXPECT_EQ(grad_fn_name(swiglu(x.to(at::kFloat), x)).find("SwigluFunction"), std::string::npos);
  EXPECT_FALSE(kernel_calls::supported(at::randn({2}, at::kBFloat16)));  // bf16 only on a GPU
}

// The fused head's chunks of `rows` rows (0: the default budget, one chunk here).
void set_chunk_rows(int64_t rows, int64_t vocab) {
  Fusions f = fusions();
  f.loss_chunk_logits = rows == 0 ? Fusions{}.loss_chunk_logits : rows * vocab;
  set_fusions(f);
}

// The head's loss and its gradients, fused (labels shifted, the gradient written over the logits),
// against causal_lm_loss of the float64 logits; some labels ignored, the head frozen or not; the
// 21 rows in one chunk, in chunks of 1, and of 4 (the last of 1).
TEST_F(Fused, LinearCrossEntropyFollowsTheFloat64LossOfTheLogits) {
  for (const int64_t chunk_rows : {0, 1, 4}) {
    for (const bool frozen_weight : {false, true}) {
      SCOPED_TRACE(testing::Message() << "chunks of " << chunk_rows << " rows, frozen weight " << frozen_weight);
      const int64_t b = 3, t = 7, hidden = 24, vocab = 301;
      set_chunk_rows(chunk_rows, vocab);
      const at::Tensor h = at::randn({b, t, hidden}, at::kDouble), w = at::randn({vocab, hidden}, at::kDouble) * 0.3;
      at::Tensor labels = at::randint(vocab, {b, t}, at::kLong);
      labels.select(1, 2).fill_(kIgnoreIndex);
      const at::Tensor h32 = h.to(at::kFloat).requires_grad_(true), h64 = h.clone().requires_grad_(true);
      const at::Tensor w32 = w.to(at::kFloat).requires_grad_(!frozen_weight), w64 = w.clone().requires_grad_(true);
      const at::Tensor loss = linear_cross_entropy(h32, w32, labels);
      ASSERT_NE(grad_fn_name(loss).find("LinearCrossEntropyFunction"), std::string::npos) << grad_fn_name(loss);
      at::Tensor exact;
      with_aten([&] { exact = linear_cross_entropy(h64, w64, labels); });
      EXPECT_NEAR(loss.item<double>(), exact.item<double>(), 1e-5 * std::abs(exact.item<double>()));
      (loss * 0.5).backward();  // an incoming gradient other than 1
      (exact * 0.5).backward();
      EXPECT_LE(max_diff(h32.grad(), h64.grad()), 1e-5 * max_abs(h64.grad()));
      if (frozen_weight) {
        EXPECT_FALSE(w32.grad().defined());
      } else {
        EXPECT_LE(max_diff(w32.grad(), w64.grad()), 1e-5 * max_abs(w64.grad()));
      }
    }
  }
}

// DPO's per-token losses, fused, against causal_lm_token_losses of the float64 logits, under a
// random incoming gradient per token (what a DPO loss sends back through each row's sum); an
// ignored label and the last position give 0. The 24 rows in one chunk, in chunks of 1, and of 5
// (the last of 4): a trainable weight's backward then computes each chunk's logits again.
TEST_F(Fused, LinearTokenLossesFollowTheFloat64TokenLossesOfTheLogits) {
  for (const int64_t chunk_rows : {0, 1, 5}) {
    for (const bool frozen_weight : {false, true}) {
      SCOPED_TRACE(testing::Message() << "chunks of " << chunk_rows << " rows, frozen weight " << frozen_weight);
      const int64_t b = 4, t = 6, hidden = 16, vocab = 203;
      set_chunk_rows(chunk_rows, vocab);
      const at::Tensor h = at::randn({b, t, hidden}, at::kDouble), w = at::randn({vocab, hidden}, at::kDouble) * 0.3;
      at::Tensor labels = at::randint(vocab, {b, t}, at::kLong);
      labels.select(1, 3).fill_(kIgnoreIndex);
      const at::Tensor h32 = h.to(at::kFloat).requires_grad_(true), h64 = h.clone().requires_grad_(true);
      const at::Tensor w32 = w.to(at::kFloat).requires_grad_(!frozen_weight), w64 = w.clone().requires_grad_(true);
      const at::Tensor losses = linear_token_losses(h32, w32, labels);
      // The (B, T) view of the function's rows.
      ASSERT_TRUE(losses.grad_fn() && !losses.grad_fn()->next_edges().empty());
      const std::string fn = losses.grad_fn()->next_edges()[0].function->name();
      ASSERT_NE(fn.find(frozen_weight ? "ChunkedTokenLossesFunction" : "LinearTokenLossesFunction"), std::string::npos)
          << fn;
      at::Tensor exact;
      with_aten([&] { exact = linear_token_losses(h64, w64, labels); });
      ASSERT_EQ(losses.sizes(), exact.sizes());
      EXPECT_LE(max_diff(losses, exact), 1e-5 * max_abs(exact));
      EXPECT_EQ(max_abs(losses.select(1, 2)), 0.0) << "label 3 is ignored: position 2 predicts it";
      EXPECT_EQ(max_abs(losses.select(1, t - 1)), 0.0) << "the last position predicts nothing";
      const at::Tensor g = at::randn({b, t}, at::kDouble);
      losses.backward(g.to(at::kFloat));
      exact.backward(g);
      EXPECT_LE(max_diff(h32.grad(), h64.grad()), 1e-5 * max_abs(h64.grad()));
      if (frozen_weight) {
        EXPECT_FALSE(w32.grad().defined());
      } else {
        EXPECT_LE(max_diff(w32.grad(), w64.grad()), 1e-5 * max_abs(w64.grad()));
      }
    }
  }
}

// Without gradients (evaluation, DPO's reference pass) the fused head computes the losses alone,
// chunk by chunk: within the float64 loss's bounds, nothing to differentiate, and bit for bit what
// the same chunks give with gradients, the per-token losses' with a frozen and a trainable weight.
TEST_F(Fused, WithoutGradientsTheHeadGivesTheSameLosses) {
  const int64_t b = 2, t = 9, hidden = 8, vocab = 97;
  const at::Tensor h = at::randn({b, t, hidden}, at::kDouble), w = at::randn({vocab, hidden}, at::kDouble) * 0.3;
  const at::Tensor labels = at::randint(vocab, {b, t}, at::kLong);
  const at::Tensor h32 = h.to(at::kFloat).requires_grad_(true), w32 = w.to(at::kFloat);
  set_chunk_rows(4, vocab);
  const at::Tensor loss = linear_cross_entropy(h32, w32.clone().requires_grad_(true), labels);
  const at::Tensor losses = linear_token_losses(h32, w32, labels);
  const at::Tensor trained_losses = linear_token_losses(h32, w32.clone().requires_grad_(true), labels);
  at::Tensor exact_loss, exact_losses;
  with_aten([&] {
    exact_loss = linear_cross_entropy(h, w, labels);
    exact_losses = linear_token_losses(h, w, labels);
  });
  at::NoGradGuard no_grad;
  const at::Tensor eval_loss = linear_cross_entropy(h32, w32, labels), eval_losses = linear_token_losses(h32, w32, labels);
  EXPECT_FALSE(eval_loss.requires_grad());
  EXPECT_FALSE(eval_losses.requires_grad());
  EXPECT_NEAR(eval_loss.item<double>(), exact_loss.item<double>(), 1e-5 * std::abs(exact_loss.item<double>()));
  EXPECT_LE(max_diff(eval_losses, exact_losses), 1e-5 * max_abs(exact_losses));
  EXPECT_TRUE(at::equal(eval_loss, loss.detach()));
  EXPECT_TRUE(at::equal(eval_losses, losses.detach()));
  EXPECT_TRUE(at::equal(eval_losses, trained_losses.detach()));
}

// Labels with none that count give NaN, as the mean cross-entropy does.
TEST_F(Fused, LinearCrossEntropyWithoutLabelledTokensIsNaN) {
  const at::Tensor h = at::randn({1, 3, 4}), w = at::randn({5, 4});
  const at::Tensor labels = at::full({1, 3}, kIgnoreIndex, at::kLong);
  EXPECT_TRUE(std::isnan(linear_cross_entropy(h, w, labels).item<double>()));
  at::Tensor aten;
  with_aten([&] { aten = linear_cross_entropy(h, w, labels); });
  EXPECT_TRUE(std::isnan(aten.item<double>()));
}

// The hidden state the head takes: the embedding and every layer.
at::Tensor hidden_of(const LlamaForCausalLM& m, const at::Tensor& ids) {
  const at::Tensor positions = default_position_ids(ids);
  at::Tensor h = m.embed(ids);
  const RopeTables rope = m.rope(positions, h.scalar_type());
  for (int64_t i = 0; i < m.num_layers(); ++i) h = m.layer(i).forward(h, rope, AttentionMask{});
  return h;
}

// A two-layer model's loss and every parameter's gradient, fused in fp32, against the float64
// model through ATen.
TEST_F(Fused, ModelLossAndGradientsFollowTheFloat64Model) {
  LlamaConfig c = LlamaConfig::tiny();
  c.num_hidden_layers = 2;
  LlamaForCausalLM exact(c, at::TensorOptions().dtype(at::kDouble));
  init_weights(exact, 11);
  LlamaForCausalLM fused(c, at::TensorOptions().dtype(at::kFloat));
  std::vector<NamedParam> pe = exact.named_parameters(), pf = fused.named_parameters();
  for (size_t i = 0; i < pe.size(); ++i) {
    if (pe[i].name.find("norm") != std::string::npos) pe[i].tensor->add_(at::randn(pe[i].tensor->sizes(), at::kDouble) * 0.1);
    *pf[i].tensor = pe[i].tensor->to(at::kFloat);
    pe[i].tensor->requires_grad_(true);
    pf[i].tensor->requires_grad_(true);
  }
  const at::Tensor ids = at::randint(c.vocab_size, {2, 11}, at::kLong);
  const at::Tensor loss = fused.head_loss(hidden_of(fused, ids), ids);
  ASSERT_NE(grad_fn_name(loss).find("LinearCrossEntropyFunction"), std::string::npos) << grad_fn_name(loss);
  at::Tensor loss64;
  with_aten([&] { loss64 = causal_lm_loss(exact.forward(ids), ids); });
  EXPECT_NEAR(loss.item<double>(), loss64.item<double>(), 1e-5 * std::abs(loss64.item<double>()));
  loss.backward();
  loss64.backward();
  for (size_t i = 0; i < pe.size(); ++i)
    EXPECT_LE(max_diff(pf[i].tensor->grad(), pe[i].tensor->grad()), 1e-4 * max_abs(pe[i].tensor->grad()) + 1e-9)
        << pe[i].name;
}

}  // namespace
}  // namespace shardtune::model
