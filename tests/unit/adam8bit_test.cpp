// 8-bit AdamW (runtime/fsdp/adam8bit.h) bit for bit against the independent numpy reference of
// bitsandbytes' block-wise update written by tests/reference/adam8bit_reference.py (directory in
// SHARDTUNE_ADAM8BIT_REFERENCE): the maps, the codes, and 20 steps of each case through the host
// loop and through the ATen operations. Then the properties FSDP and checkpoints rely on: a
// tensor's blocks update the same wherever its pieces lie (in a flat parameter, split between
// shards), decoded moments encode back to the same state, and the state's size.
#include <ATen/TensorOperators.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/from_blob.h>
#include <ATen/ops/zeros.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "runtime/fsdp/adam8bit.h"
#include "runtime/fsdp/adam8bit_ops.h"
#include "runtime/fsdp/adamw.h"
#include "runtime/quant/dynamic_map.h"
#include "tests/unit/reference_files.h"

namespace shardtune::fsdp {
namespace {

std::string reference_dir() { return testing_support::reference_dir("SHARDTUNE_ADAM8BIT_REFERENCE"); }

template <class T>
std::vector<T> read_raw(const std::string& name) {
  return testing_support::read_raw<T>(reference_dir(), name);
}

nlohmann::json cases() { return testing_support::read_cases(reference_dir()); }

using testing_support::first_difference;

template <class T>
int64_t first_difference(const at::Tensor& t, const std::vector<T>& b) {
  const at::Tensor c = t.to(at::kCPU).contiguous();
  return first_difference(c.data_ptr<T>(), b, static_cast<size_t>(c.numel()));
}

at::Tensor tensor_of(const std::vector<float>& v) {
  return at::from_blob(const_cast<float*>(v.data()), {static_cast<int64_t>(v.size())}, at::kFloat).clone();
}

// Where the reference cases run: the CPU, or with ST_TEST_DEVICE=cuda the GPU (scripts/gpu-check.sh),
// through the ATen operations there.
at::Device test_device() {
  const char* d = std::getenv("ST_TEST_DEVICE");
  return d != nullptr && std::string(d) == "cuda" ? at::Device(at::kCUDA, 0) : at::Device(at::kCPU);
}

class Adam8bitReference : public ::testing::Test {
 protected:
  void SetUp() override {
    if (reference_dir().empty()) GTEST_SKIP() << "SHARDTUNE_ADAM8BIT_REFERENCE is not set (run through ctest)";
  }
};

TEST_F(Adam8bitReference, MapsAreBitsandbytesMaps) {
  const nlohmann::json c = cases();
  for (bool is_signed : {true, false}) {
    const std::vector<float> want = read_raw<float>(c["maps"][is_signed ? "signed" : "unsigned"]);
    const std::array<float, 256>& got = quant::dynamic_map(is_signed);
    EXPECT_EQ(first_difference(got.data(), want, 256), -1) << (is_signed ? "signed" : "unsigned");
  }
  // Values bitsandbytes' users see: the signed map's ends, the unsigned map's smallest step.
  EXPECT_EQ(quant::dynamic_map(true)[0], -0.992968738079071f);
  EXPECT_EQ(quant::dynamic_map(true)[255], 1.0f);
  EXPECT_EQ(quant::dynamic_map(false)[0], 0.0f);
  EXPECT_EQ(quant::dynamic_map(false)[1], 3.2500003e-07f);
}

TEST_F(Adam8bitReference, CodesAtEveryMidpoint) {
  const nlohmann::json c = cases();
  for (bool is_signed : {true, false}) {
    const nlohmann::json& which = c["codes"][is_signed ? "signed" : "unsigned"];
    const std::vector<float> x = read_raw<float>(which["x"]);
    const std::vector<uint8_t> want = read_raw<uint8_t>(which["code"]);
    ASSERT_EQ(x.size(), want.size());
    ASSERT_GT(x.size(), 1000u);
    const std::array<float, 256>& map = quant::dynamic_map(is_signed);
    for (size_t i = 0; i < x.size(); ++i)
      ASSERT_EQ(int(encode(map, x[i], is_signed)), int(want[i])) << x[i] << (is_signed ? " signed" : " unsigned");
    // The ATen search too.
    const Adam8bitMaps maps = adam8bit_maps(test_device());
    const at::Tensor got =
        encode_ops(is_signed ? maps.signed_map : maps.unsigned_map, tensor_of(x).to(test_device()), is_signed);
    EXPECT_EQ(first_difference(got.to(at::kByte), want), -1);
  }
}

struct Case {
  nlohmann::json spec;
  int64_t n = 0, steps = 0;
  std::vector<float> p0, grads;
};

// 20 steps of a case from the reference's initial parameters and gradients, on the host loop
// (through AdamW) or through the ATen operations; the state after the first and the last step is
// compared with the reference's.
void run_case(const Case& c, bool ops) {
  const nlohmann::json& s = c.spec;
  SCOPED_TRACE(s["name"].get<std::string>() + (ops ? " (ATen operations)" : " (host loop)"));
  const bool bf16_params = s["bf16_params"], bf16_grads = s["bf16_grads"];
  const at::Device device = test_device();
  at::Tensor p = tensor_of(c.p0).to(device);
  if (bf16_params) p = p.to(at::kBFloat16);  // exact: the reference's values are bf16's
  at::Tensor g = at::zeros({c.n}, at::TensorOptions().dtype(bf16_grads ? at::kBFloat16 : at::kFloat).device(device));
  AdamW opt({s["beta1"], s["beta2"], s["eps"], s["weight_decay"], /*fused=*/true, /*blockwise_8bit=*/true});
  // A small tensor's one piece, not quantized: fp32 moments.
  const bool fp32_state = s["fp32_state"];
  opt.add(p, g, {{0, c.n, !fp32_state}});
  at::Tensor m = at::zeros({c.n}, device), v = at::zeros({c.n}, device);  // the ATen path's fp32 moments
  const Adam8bitMaps maps = adam8bit_maps(device);
  for (int64_t t = 1; t <= c.steps; ++t) {
    g.copy_(tensor_of(std::vector<float>(c.grads.begin() + (t - 1) * c.n, c.grads.begin() + t * c.n)));
    if (!ops) {
      opt.step(s["lr"]);
    } else {
      const Adam8bitScalars sc = adam8bit_scalars(s["lr"], s["beta1"], s["beta2"], s["eps"], s["weight_decay"], t);
      if (fp32_state)
        adam32bit_update_ops(p, g, m, v, sc);
      else
        adam8bit_update_ops(p, g, opt.codes(0, 0), opt.codes(0, 1), opt.absmax(0, 0), opt.absmax(0, 1), sc, maps);
    }
    if (t != 1 && t != c.steps) continue;
    const nlohmann::json& want = s[t == 1 ? "first" : "last"];
    SCOPED_TRACE("after step " + std::to_string(t));
    EXPECT_EQ(first_difference(p.to(at::kFloat), read_raw<float>(want["p"])), -1) << "parameters";
    if (fp32_state) {
      const at::Tensor got_m = ops ? m : opt.decoded(0, 0), got_v = ops ? v : opt.decoded(0, 1);
      EXPECT_EQ(first_difference(got_m, read_raw<float>(want["m"])), -1) << "first moment";
      EXPECT_EQ(first_difference(got_v, read_raw<float>(want["v"])), -1) << "second moment";
      continue;
    }
    EXPECT_EQ(first_difference(opt.codes(0, 0), read_raw<uint8_t>(want["codes1"])), -1) << "first-moment codes";
    EXPECT_EQ(first_difference(opt.codes(0, 1), read_raw<uint8_t>(want["codes2"])), -1) << "second-moment codes";
    EXPECT_EQ(first_difference(opt.absmax(0, 0), read_raw<float>(want["absmax1"])), -1) << "first-moment absmax";
    EXPECT_EQ(first_difference(opt.absmax(0, 1), read_raw<float>(want["absmax2"])), -1) << "second-moment absmax";
  }
}

TEST_F(Adam8bitReference, TwentyStepsBitForBit) {
  const nlohmann::json all = cases();
  ASSERT_GE(all["cases"].size(), 10u);
  for (const nlohmann::json& s : all["cases"]) {
    Case c{s, s["numel"], s["steps"], read_raw<float>(s["p0"]), read_raw<float>(s["grads"])};
    ASSERT_EQ(static_cast<int64_t>(c.grads.size()), c.n * c.steps);
    // bf16 parameters take the ATen operations whatever the device (the host loop is fp32's).
    if (!s["bf16_params"].get<bool>()) run_case(c, /*ops=*/false);
    run_case(c, /*ops=*/true);
  }
}

// Random gradients of spread-out scales, as the reference's.
std::vector<at::Tensor> gradients(int64_t n, int steps, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal;
  std::vector<at::Tensor> out;
  for (int t = 0; t < steps; ++t) {
    std::vector<float> g(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i)
      g[static_cast<size_t>(i)] = normal(rng) * std::pow(10.0f, -static_cast<float>((i / kAdam8bitBlock) % 5));
    out.push_back(tensor_of(g));
  }
  return out;
}

// A flat parameter holding tensors A (1000 elements) and B (300) at block-aligned offsets 0 and
// 1024, padded to 1536, updated as a whole and as two shards split at a block boundary, equals A
// and B updated alone: blocks are each tensor's own, wherever its pieces lie. B's moments are fp32
// (a piece not quantized), the same split or not.
TEST(Adam8bit, PiecesUpdateAsTheirTensorsAlone) {
  constexpr int kSteps = 6;
  const AdamWConfig config{0.9, 0.999, 1e-8, 0.01, true, true};
  const std::vector<at::Tensor> ga = gradients(1000, kSteps, 1), gb = gradients(300, kSteps, 2);
  at::Tensor a = at::zeros({1000}) + 0.5, b = at::zeros({300}) - 0.25;
  at::Tensor grad_a = at::zeros({1000}), grad_b = at::zeros({300});
  AdamW alone(config);
  alone.add(a, grad_a);
  alone.add(b, grad_b, {{0, 300, false}});

  at::Tensor flat = at::zeros({1536}), flat_grad = at::zeros({1536});
  flat.narrow(0, 0, 1000).fill_(0.5);
  flat.narrow(0, 1024, 300).fill_(-0.25);
  AdamW whole(config);
  whole.add(flat, flat_grad, {{0, 1000}, {1024, 300, false}});

  at::Tensor s0 = flat.narrow(0, 0, 768).clone(), s1 = flat.narrow(0, 768, 768).clone();
  at::Tensor g0 = at::zeros({768}), g1 = at::zeros({768});
  AdamW shard0(config), shard1(config);
  shard0.add(s0, g0, {{0, 768}});
  shard1.add(s1, g1, {{0, 232}, {256, 300, false}});

  for (int t = 0; t < kSteps; ++t) {
    grad_a.copy_(ga[t]);
    grad_b.copy_(gb[t]);
    flat_grad.narrow(0, 0, 1000).copy_(ga[t]);
    flat_grad.narrow(0, 1024, 300).copy_(gb[t]);
    g0.copy_(flat_grad.narrow(0, 0, 768));
    g1.copy_(flat_grad.narrow(0, 768, 768));
    for (AdamW* o : {&alone, &whole, &shard0, &shard1}) o->step(1e-3);
  }
  const auto same = [](const at::Tensor& x, const at::Tensor& y) { return x.equal(y); };
  EXPECT_TRUE(same(flat.narrow(0, 0, 1000), a));
  EXPECT_TRUE(same(flat.narrow(0, 1024, 300), b));
  EXPECT_TRUE(same(flat.narrow(0, 1000, 24), at::zeros({24}))) << "an alignment gap changed";
  EXPECT_TRUE(same(at::cat({s0, s1}), flat));
  for (int m = 0; m < 2; ++m) {
    EXPECT_TRUE(same(whole.codes(0, m).narrow(0, 0, 1000), alone.codes(0, m).narrow(0, 0, 1000)));
    EXPECT_TRUE(same(whole.absmax(0, m).narrow(0, 0, 4), alone.absmax(0, m)));
    EXPECT_TRUE(same(at::cat({shard0.absmax(0, m), shard1.absmax(0, m)}), whole.absmax(0, m)));
    EXPECT_TRUE(same(at::cat({shard0.codes(0, m), shard1.codes(0, m)}).narrow(0, 0, 1000),
                     whole.codes(0, m).narrow(0, 0, 1000)));
    // The moments as a checkpoint holds them: A decoded, B's fp32 as they are.
    const at::Tensor w = whole.decoded(0, m);
    EXPECT_TRUE(same(w.narrow(0, 0, 1000), alone.decoded(0, m)));
    EXPECT_TRUE(same(w.narrow(0, 1024, 300), alone.decoded(1, m)));
    EXPECT_TRUE(same(at::cat({shard0.decoded(0, m), shard1.decoded(0, m)}), w));
    EXPECT_GT(w.narrow(0, 1024, 300).abs().max().item<float>(), 0.0f);
  }
}

// What a checkpoint holds (decoded moments, scales) gives the state back: codes that decode to the
// same values, and so the same next steps. With scales so small that codes decode alike, any of
// them does; a value no code gives is named.
TEST(Adam8bit, DecodedMomentsEncodeBack) {
  const AdamWConfig config{0.9, 0.999, 1e-8, 0.0, true, true};
  constexpr int64_t n = 1300;
  at::Tensor p = at::zeros({n}), g = at::zeros({n});
  AdamW trained(config);
  trained.add(p, g);
  for (const at::Tensor& grad : gradients(n, 5, 3)) {
    g.copy_(grad);
    trained.step(1e-3);
  }
  // A scale in the subnormal range, where codes near zero decode alike.
  trained.absmax(0, 1)[2].fill_(1e-41f);

  at::Tensor p2 = p.clone(), g2 = at::zeros({n});
  AdamW restored(config);
  restored.add(p2, g2);
  for (int m = 0; m < 2; ++m) restored.absmax(0, m).copy_(trained.absmax(0, m));
  const at::Tensor m = trained.decoded(0, 0), v = trained.decoded(0, 1);
  ASSERT_FALSE(restored.encode_moments(0, m, v).has_value());
  EXPECT_TRUE(restored.decoded(0, 0).equal(m));
  EXPECT_TRUE(restored.decoded(0, 1).equal(v));
  EXPECT_TRUE(restored.codes(0, 0).narrow(0, 0, n).equal(trained.codes(0, 0).narrow(0, 0, n)));
  // The next steps are the same.
  restored.set_step_count(trained.step_count());
  for (const at::Tensor& grad : gradients(n, 3, 4)) {
    g.copy_(grad);
    g2.copy_(grad);
    trained.step(1e-3);
    restored.step(1e-3);
  }
  EXPECT_TRUE(p.equal(p2));

  // A damaged value: its element is named and nothing changes.
  const at::Tensor before = restored.codes(0, 0).clone();
  at::Tensor bad = restored.decoded(0, 0);
  bad[700] = bad[700].item<float>() * 1.001f + 1e-30f;
  const std::optional<int64_t> where = restored.encode_moments(0, bad, restored.decoded(0, 1));
  ASSERT_TRUE(where.has_value());
  EXPECT_EQ(*where, 700);
  EXPECT_TRUE(restored.codes(0, 0).equal(before));
}

// The table the host loop codes by gives the search's code for every float: 4M random bit
// patterns (every exponent, NaN and infinities), and every float within 64 ulp of each map value
// and midpoint, for both maps and both kinds of bounds.
TEST(Adam8bit, CodeTableIsTheSearch) {
  std::mt19937 rng(7);
  for (bool is_signed : {true, false})
    for (bool ends_from_map : {false, true}) {
      const std::array<float, 256>& map = quant::dynamic_map(is_signed);
      const float lower = is_signed ? -1.0f : 0.0f;
      const quant::CodeTable table(map, lower, ends_from_map);
      EXPECT_LT(table.stepped_intervals(), 3000);
      const auto check = [&](float x) {
        ASSERT_EQ(int(table.code(x)), int(quant::search_code(map, x, lower, ends_from_map))) << x;
      };
      for (int i = 0; i < (1 << 22); ++i) {
        const uint32_t bits = rng();
        float x;
        std::memcpy(&x, &bits, sizeof x);
        check(x);
      }
      for (size_t k = 0; k < 256; ++k) {
        std::vector<float> near = {map[k]};
        if (k + 1 < 256) near.push_back((map[k] + map[k + 1]) * 0.5f);
        for (const float c : near) {
          float x = c, y = c;
          for (int u = 0; u < 64; ++u) {
            check(x);
            check(y);
            x = std::nextafter(x, 2.0f);
            y = std::nextafter(y, -2.0f);
          }
        }
      }
    }
}

// bitsandbytes' 2.03 bytes per parameter: a byte per moment and an fp32 scale per 256 elements of
// each, against fp32 AdamW's 8.
TEST(Adam8bit, StateIsAQuarterOfAdamWs) {
  constexpr int64_t n = int64_t(1) << 20;
  at::Tensor p = at::zeros({n}), g = at::zeros({n});
  AdamW fp32({}), eight({0.9, 0.999, 1e-8, 0.0, true, true});
  fp32.add(p, g);
  eight.add(p, g);
  const double ratio = static_cast<double>(eight.state_bytes()) / static_cast<double>(fp32.state_bytes());
  EXPECT_EQ(eight.state_bytes(), 2 * n + 2 * 4 * (n / 256));
  EXPECT_LE(ratio, 0.27);
  EXPECT_DOUBLE_EQ(ratio, 2.03125 / 8);
}

}  // namespace
}  // namespace shardtune::fsdp
