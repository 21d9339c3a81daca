// SIGKILL at a named phase of a save, for tests.
#include "checkpoint/fault_injection.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <csignal>
#include <cstdlib>

namespace shardtune::checkpoint {

void kill_point(const char* phase, int64_t step, int rank) {
  static const char* spec = std::getenv("SHARDTUNE_TEST_KILL_AT");
  if (spec == nullptr) return;
  if (spec != fmt::format("{}@{}:{}", phase, step, rank) && spec != fmt::format("{}@*:{}", phase, rank)) return;
  spdlog::default_logger()->flush();
  ::kill(::getpid(), SIGKILL);
}

}  // namespace shardtune::checkpoint
