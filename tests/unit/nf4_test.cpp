// NF4 quantisation (runtime/quant/nf4.h) bit for bit against the independent numpy reference
// written by tests/reference/nf4_reference.py (directory in SHARDTUNE_NF4_REFERENCE), and the
// record layout's own properties.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "common/error.h"
#include "runtime/quant/nf4.h"
#include "tests/unit/reference_files.h"

namespace shardtune::quant {
namespace {

std::string reference_dir() { return testing_support::reference_dir("SHARDTUNE_NF4_REFERENCE"); }

template <class T>
std::vector<T> read_raw(const std::string& name) {
  return testing_support::read_raw<T>(reference_dir(), name);
}

nlohmann::json cases() { return testing_support::read_cases(reference_dir()); }

uint32_t bits(float f) {
  uint32_t b = 0;
  std::memcpy(&b, &f, 4);
  return b;
}

using testing_support::first_difference;

class Nf4Reference : public ::testing::Test {
 protected:
  void SetUp() override {
    if (reference_dir().empty()) GTEST_SKIP() << "SHARDTUNE_NF4_REFERENCE is not set (run through ctest)";
  }
};

TEST_F(Nf4Reference, DynamicMapIsBitsandbytesMap) {
  const std::vector<float> want = read_raw<float>(cases()["dynamic_map"]);
  ASSERT_EQ(want.size(), 256u);
  for (size_t i = 0; i < 256; ++i) EXPECT_EQ(bits(dynamic_map()[i]), bits(want[i])) << "index " << i;
  // Two values bitsandbytes' users see in its map: its first and its smallest positive one.
  EXPECT_EQ(dynamic_map()[0], -0.992968738079071f);
  EXPECT_EQ(dynamic_map()[128], 5.500000384017767e-07f);
}

TEST_F(Nf4Reference, CodesAtEveryThresholdAndMidpoint) {
  for (const char* kind : {"nf4_codes", "dynamic_codes"}) {
    const nlohmann::json c = cases()[kind];
    const std::vector<float> x = read_raw<float>(c["x"]);
    const std::vector<uint8_t> code = read_raw<uint8_t>(c["code"]);
    ASSERT_EQ(x.size(), code.size());
    for (size_t i = 0; i < x.size(); ++i) {
      const uint8_t got = std::string(kind) == "nf4_codes" ? nf4_code(x[i]) : dynamic_code(x[i]);
      EXPECT_EQ(int(got), int(code[i])) << kind << " of " << x[i] << " (bits " << std::hex << bits(x[i]) << ")";
    }
  }
}

TEST_F(Nf4Reference, TensorsQuantiseAndDequantiseBitForBit) {
  const nlohmann::json all = cases();
  ASSERT_GE(all["cases"].size(), 10u);
  for (const nlohmann::json& c : all["cases"]) {
    SCOPED_TRACE(c["name"].get<std::string>());
    const int64_t n = c["numel"];
    const Nf4Format format{c["block_size"].get<int64_t>(), c["double_quant"].get<bool>()};
    const std::vector<float> x = read_raw<float>(c["input"]);
    ASSERT_EQ(static_cast<int64_t>(x.size()), n);
    const BnbTensor q = quantize_tensor(x.data(), n, format);
    EXPECT_EQ(first_difference(q.packed, read_raw<uint8_t>(c["packed"])), -1) << "packed codes";
    if (format.double_quant) {
      EXPECT_EQ(first_difference(q.qabsmax, read_raw<uint8_t>(c["qabsmax"])), -1) << "8-bit scales";
      EXPECT_EQ(first_difference(q.absmax2, read_raw<float>(c["absmax2"])), -1) << "absmax2";
      EXPECT_EQ(bits(q.offset), bits(read_raw<float>(c["offset"]).at(0))) << "offset";
    } else {
      EXPECT_EQ(first_difference(q.absmax, read_raw<float>(c["absmax"])), -1) << "absmax";
    }
    // Dequantised through the records, as FSDP holds them: the reference's fp32 values, and 0 in
    // the padding after the tensor's end.
    const std::vector<uint8_t> records = records_from_bnb(q, n, format);
    std::vector<float> values(static_cast<size_t>(format.records(n) * format.record_elements()));
    dequantize_records(records.data(), format.records(n), format, values.data());
    for (size_t i = static_cast<size_t>(n); i < values.size(); ++i) ASSERT_EQ(std::fabs(values[i]), 0.0f) << i;
    values.resize(static_cast<size_t>(n));
    const int64_t diff = first_difference(values, read_raw<float>(c["dequantized"]));
    EXPECT_EQ(diff, -1) << "dequantised element " << diff;
  }
}

// Quantising a tensor a few records at a time (as each rank quantises its shard), with the offset
// from merged partial sums, gives the records of quantising it whole.
TEST(Nf4Records, AnySplitIntoRecordRunsGivesTheSameBytes) {
  std::mt19937 gen(7);
  std::normal_distribution<float> normal(0.0f, 0.05f);
  const Nf4Format format{64, true};
  const int64_t n = format.record_elements() * 5 + 1234;
  std::vector<float> x(static_cast<size_t>(n));
  for (float& v : x) v = normal(gen);
  const std::vector<uint8_t> whole = records_from_bnb(quantize_tensor(x.data(), n, format), n, format);
  const int64_t count = format.records(n), per = format.record_elements();
  for (int64_t first_split = 1; first_split < count; ++first_split) {
    // Two "ranks": records [0, s) and [s, count); each sums its own blocks' maxima.
    ExactSum a, b;
    std::vector<float> scratch(static_cast<size_t>(count * 256));
    block_absmax(x.data(), first_split * per, format, scratch.data(), &a);
    block_absmax(x.data() + first_split * per, n - first_split * per, format, scratch.data(), &b);
    a.merge(b);
    const float offset = mean_absmax(a, (n + 63) / 64);
    std::vector<uint8_t> split(whole.size());
    quantize_records(x.data(), n, first_split, offset, format, split.data());
    quantize_records(x.data() + first_split * per, n - first_split * per, count - first_split, offset, format,
                     split.data() + first_split * format.record_bytes());
    EXPECT_EQ(first_difference(split, whole), -1) << "split after record " << first_split;
  }
  // Quantised first with fp32 scales (before the offset is known), then double-quantised.
  const Nf4Format single{64, false};
  std::vector<uint8_t> provisional(static_cast<size_t>(count * single.record_bytes())), later(whole.size());
  quantize_records(x.data(), n, count, 0.0f, single, provisional.data());
  ExactSum sum;
  std::vector<float> scratch(static_cast<size_t>(count * 256));
  block_absmax(x.data(), n, format, scratch.data(), &sum);
  double_quantize_records(provisional.data(), n, count, mean_absmax(sum, (n + 63) / 64), format, later.data());
  EXPECT_EQ(first_difference(later, whole), -1) << "double-quantised after the fact";
}

TEST(Nf4Records, ExactSumDoesNotDependOnOrder) {
  std::mt19937 gen(3);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  std::vector<float> v;
  for (int i = 0; i < 10000; ++i) v.push_back(std::ldexp(u(gen), static_cast<int>(gen() % 200) - 130));
  ExactSum forward, backward;
  for (float x : v) forward.add(x);
  for (auto it = v.rbegin(); it != v.rend(); ++it) backward.add(*it);
  EXPECT_EQ(forward.value(), backward.value());
  double reference = 0;
  for (float x : v) reference += static_cast<double>(x);  // within double rounding of the exact sum
  EXPECT_NEAR(forward.value(), reference, 1e-12 * reference);
}

TEST(Nf4Records, NonFiniteWeightsAndBadBlockSizesAreRefused) {
  std::vector<float> x(128, 0.1f);
  x[70] = NAN;
  std::vector<float> absmax(2);
  try {
    block_absmax(x.data(), 128, Nf4Format{}, absmax.data(), nullptr);
    FAIL() << "NaN accepted";
  } catch (const common::Error& e) {
    EXPECT_NE(std::string(e.what()).find("element 70 is nan"), std::string::npos) << e.what();
  }
  for (int64_t bad : {16, 48, 8192}) EXPECT_THROW(check_format(Nf4Format{bad, true}), common::Error) << bad;
  for (int64_t good : {32, 64, 4096}) EXPECT_NO_THROW(check_format(Nf4Format{good, true})) << good;
}

}  // namespace
}  // namespace shardtune::quant
