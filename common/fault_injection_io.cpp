// Test-only slow file-system calls (fault_injection.h), apart from the rest so that the few
// sources the fuzz targets compile need nothing more.
#include <chrono>
#include <cstdlib>
#include <string_view>
#include <thread>

#include "common/fault_injection.h"

namespace shardtune::common {

void slow_io_point(const char* call) {
  static const char* spec = std::getenv("SHARDTUNE_TEST_SLOW_IO");
  if (spec == nullptr) return;
  const char* rank = std::getenv("OMPI_COMM_WORLD_RANK");
  if (rank == nullptr) rank = std::getenv("PMIX_RANK");
  const std::string_view text(spec);
  const size_t first = text.find(':'), last = text.rfind(':');
  if (first == std::string_view::npos || last == first || text.substr(0, first) != call) return;
  if (rank == nullptr || text.substr(last + 1) != rank) return;
  std::this_thread::sleep_for(std::chrono::duration<double>(std::strtod(spec + first + 1, nullptr)));
}

}  // namespace shardtune::common
