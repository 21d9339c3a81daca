// Test-only faults: SIGKILL at a named phase of a save, a stop signal after a step, a slow save, a
// non-finite loss.
#include "common/fault_injection.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <string>
#include <string_view>
#include <cstdlib>
#include <thread>

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

void save_delay_point(const char* part) {
  static const char* spec = std::getenv("SHARDTUNE_TEST_SAVE_DELAY_S");
  const std::string prefix = fmt::format("{}:", part);
  if (spec == nullptr || std::string_view(spec).substr(0, prefix.size()) != prefix) return;
  std::this_thread::sleep_for(std::chrono::duration<double>(std::strtod(spec + prefix.size(), nullptr)));
}

bool nonfinite_point(int64_t step, int rank) {
  static const char* spec = std::getenv("SHARDTUNE_TEST_NONFINITE_AT");
  return spec != nullptr && spec == fmt::format("{}:{}", step, rank);
}

std::string group_fail_point(int64_t step, int rank) {
  static const char* spec = std::getenv("SHARDTUNE_TEST_GROUP_FAIL_AT");
  if (spec == nullptr) return {};
  const std::string prefix = fmt::format("{}:{}:", step, rank);
  const std::string_view text(spec);
  return text.substr(0, prefix.size()) == prefix ? std::string(text.substr(prefix.size())) : std::string();
}

}  // namespace shardtune::common
