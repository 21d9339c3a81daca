// Adafactor over the shards of 1 to 4 ranks (runtime/fsdp/adafactor.h): each rank holds a part of
// every flat parameter, cut through rows, and the tensors' sums go through the group's
// all-reduces; every rank's pieces, statistics and first moments stay within 1e-5 of the float64
// reference of transformers' update (tests/reference/adafactor_reference.py), as one rank's do.
#include <gtest/gtest.h>

#include "tests/mpi/test_device.h"
#include "tests/unit/adafactor_cases.h"

namespace shardtune {
namespace {

TEST(AdafactorFsdp, EveryRanksShardFollowsTheReferenceWithinOneInAHundredThousand) {
  const std::string dir = testing_support::reference_dir("SHARDTUNE_ADAFACTOR_REFERENCE");
  if (dir.empty()) GTEST_SKIP() << "SHARDTUNE_ADAFACTOR_REFERENCE is not set (run through ctest)";
  dist::ProcessGroups groups = testing_support::make_test_groups(testing_support::world_size());
  for (const nlohmann::json& c : testing_support::read_cases(dir))
    testing_support::run_adafactor_case(c, dir, groups.world.get(), testing_support::test_device(), 1e-5);
}

}  // namespace
}  // namespace shardtune
