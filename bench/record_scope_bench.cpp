// What a named range costs when no profiler records: the guard every FSDP collective, unit pass
// and training phase carries (RECORD_USER_SCOPE with a name made only while one records).
// Prints one JSON object: nanoseconds per inactive range.
#include <ATen/record_function.h>
#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <string>

int main() {
  constexpr int kRanges = 20'000'000;
  const std::string unit = "block7";
  volatile int sink = 0;
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < kRanges; ++i) {
    RECORD_USER_SCOPE(fmt::format("fsdp.all_gather.wait {}", unit));
    sink = sink + 1;
  }
  const double ns = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start).count();
  std::printf("{\"inactive_range_ns\": %.3f}\n", ns / kRanges);
  return 0;
}
