// Adafactor (runtime/fsdp/adafactor.h) against the float64 reference of transformers' update
// (tests/reference/adafactor_reference.py), on one rank holding every tensor whole; and what it
// keeps: statistics instead of a second moment per element, tensors of more than two dimensions
// refused.
#include <ATen/ops/zeros.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "common/error.h"
#include "runtime/fsdp/adafactor.h"
#include "tests/unit/adafactor_cases.h"

namespace shardtune {
namespace {

using testing_support::read_cases;
using testing_support::reference_dir;

// The CPU, or with ST_TEST_DEVICE=cuda the GPU (scripts/gpu-check.sh).
at::Device test_device() {
  const char* d = std::getenv("ST_TEST_DEVICE");
  return d != nullptr && std::string(d) == "cuda" ? at::Device(at::kCUDA, 0) : at::Device(at::kCPU);
}

TEST(AdafactorReference, EveryCaseWithinOneInAHundredThousandOfTheFloat64Update) {
  const std::string dir = reference_dir("SHARDTUNE_ADAFACTOR_REFERENCE");
  if (dir.empty()) GTEST_SKIP() << "SHARDTUNE_ADAFACTOR_REFERENCE is not set (run through ctest)";
  for (const nlohmann::json& c : read_cases(dir)) {
    const double worst = testing_support::run_adafactor_case(c, dir, nullptr, test_device(), 1e-5);
    std::printf("%-24s largest relative error %.2e\n", c["name"].get<std::string>().c_str(), worst);
  }
}

fsdp::FlatLayout one_flat(std::vector<fsdp::FlatLayout::Entry> entries) { return fsdp::FlatLayout(entries, 1); }

TEST(Adafactor, KeepsRowAndColumnMeansOfAMatrixAndASecondMomentOfAVector) {
  const fsdp::FlatLayout layout = one_flat({{"w", {64, 96}}, {"n", {96}}});
  at::Tensor p = at::zeros({layout.shard_numel()}), g = at::zeros({layout.shard_numel()});
  fsdp::Adafactor without({}, nullptr);
  without.add(p, g, layout, 0);
  EXPECT_EQ(without.state_bytes(), (64 + 96 + 96) * 4);  // AdamW: 8 bytes per element, 49920
  fsdp::AdafactorConfig with_first;
  with_first.beta1 = 0.9;
  fsdp::Adafactor with(with_first, nullptr);
  with.add(p, g, layout, 0);
  EXPECT_EQ(with.state_bytes(), (64 + 96 + 96 + 64 * 96 + 96) * 4);
  for (const fsdp::AdafactorStatistic kind : {fsdp::kRowMeans, fsdp::kColumnMeans, fsdp::kVectorMoments}) {
    const fsdp::Adafactor::Statistics whole = with.statistics(0, kind, true), share = with.statistics(0, kind, false);
    EXPECT_EQ(whole.tensor.numel(), kind == fsdp::kRowMeans ? 64 : 96);
    EXPECT_EQ(share.tensor.numel(), whole.tensor.numel());  // one rank: its share is all of them
    ASSERT_EQ(whole.layout->params().size(), 1u);
    EXPECT_EQ(whole.layout->params()[0].name, kind == fsdp::kVectorMoments ? "n" : "w");
  }
}

TEST(Adafactor, ATensorOfThreeDimensionsIsRefusedByName) {
  const fsdp::FlatLayout layout = one_flat({{"conv.weight", {4, 3, 2}}});
  fsdp::Adafactor optimizer({}, nullptr);
  try {
    optimizer.add(at::zeros({24}), at::zeros({24}), layout, 0);
    ADD_FAILURE() << "added";
  } catch (const common::Error& e) {
    EXPECT_EQ(e.kind(), common::ErrorKind::kConfig);
    EXPECT_NE(std::string(e.what()).find("conv.weight"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace shardtune
