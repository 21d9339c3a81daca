// Test-only faults: SIGKILL at a named phase of a save, a stop signal after a step.
#include "common/fault_injection.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <csignal>
#include <cstdlib>

namespace shardtune::common {

void kill_point(const char* phase, int64_t step, int rank) {
  static const char* spec = std::getenv("SHARDTUNE_TEST_KILL_AT");
  if (spec == nullptr) return;
  if (spec != fmt::format("{}@{}:{}", phase, step, rank) && spec != fmt::format("{}@*:{}", phase, rank)) return;
  spdlog::default_logger()->flush();
  ::kill(::getpid(), SIGKILL);
}

void signal_point(int64_t step, int rank) {
  static const char* spec = std::getenv("SHARDTUNE_TEST_SIGNAL_AT");
  if (spec == nullptr || spec != fmt::format("{}:{}", step, rank)) return;
  std::raise(SIGUSR1);
}

}  // namespace shardtune::common
