// Log lines carry rank, node and host; errors carry host, rank and file:line.
#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>

#include <sstream>

#include "common/error.h"
#include "common/log.h"

namespace shardtune::common {
namespace {

TEST(Log, EveryLineNamesRankNodeAndHost) {
  std::ostringstream out;
  auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(out);
  ProcessIdentity id{"gpu-node-7", 13, 16, 1, 5};
  auto logger = make_logger(id, {sink});
  logger->info("step {} loss {:.3f}", 10, 2.5);
  logger->warn("100% sure");
  const std::string text = out.str();
  EXPECT_NE(text.find("[rank 13/16 node 1 host gpu-node-7] [info] step 10 loss 2.500"), std::string::npos) << text;
  EXPECT_NE(text.find("[rank 13/16 node 1 host gpu-node-7] [warning] 100% sure"), std::string::npos) << text;
}

TEST(Log, PercentInAHostNameIsNotAPatternFlag) {
  std::ostringstream out;
  auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(out);
  auto logger = make_logger(ProcessIdentity{"odd%vhost", 0, 1, 0, 0}, {sink});
  logger->info("x");
  EXPECT_NE(out.str().find("host odd%vhost]"), std::string::npos) << out.str();
}

TEST(Log, PerRankFilePath) {
  EXPECT_EQ(rank_log_path("runs/a", 3), "runs/a/logs/rank-00003.log");
}

TEST(Errors, CarryHostRankAndLocation) {
  set_process_identity({"node-a", 2, 4, 0, 2});
  try {
    ST_CHECK(1 + 1 == 3, ErrorKind::kInternal, "arithmetic broke: {}", 42);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInternal);
    const std::string what = e.what();
    EXPECT_NE(what.find("internal error: arithmetic broke: 42 [host node-a rank 2 (tests/unit/log_test.cpp:"),
              std::string::npos) << what;
  }
  set_process_identity({});
}

}  // namespace
}  // namespace shardtune::common
