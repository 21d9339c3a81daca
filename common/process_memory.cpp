// Resident memory of this process.
#include "common/process_memory.h"

#include <malloc.h>

#include <cstring>
#include <fstream>
#include <limits>
#include <string>

namespace shardtune::common {
namespace {

int64_t status_bytes(const char* key) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind(key, 0) == 0) return std::stoll(line.substr(std::strlen(key))) * 1024;  // "kB"
  return 0;
}

}  // namespace

int64_t resident_bytes() { return status_bytes("VmRSS:"); }
int64_t peak_resident_bytes() { return status_bytes("VmHWM:"); }
void reset_peak_resident() { std::ofstream("/proc/self/clear_refs") << "5"; }

void keep_freed_host_memory() {
  mallopt(M_MMAP_THRESHOLD, 1 << 30);
  mallopt(M_TRIM_THRESHOLD, std::numeric_limits<int>::max());  // about 2 GiB: mallopt takes an int
}

void release_freed_host_memory() { malloc_trim(0); }

}  // namespace shardtune::common
