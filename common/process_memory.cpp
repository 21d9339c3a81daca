// Resident memory of this process.
#include "common/process_memory.h"

#include <malloc.h>

#include <cstring>
#include <fstream>
#include <limits>
#include <string>

// gperftools' C interface: defined where the program is linked with tcmalloc (the ranks), null
// elsewhere.
extern "C" void MallocExtension_ReleaseFreeMemory() __attribute__((weak));

namespace shardtune::common {
namespace {

int64_t status_bytes(const char* key, const char* file = "/proc/self/status") {
  std::ifstream in(file);
  std::string line;
  while (std::getline(in, line))
    if (line.rfind(key, 0) == 0) return std::stoll(line.substr(std::strlen(key))) * 1024;  // "kB"
  return 0;
}

}  // namespace

int64_t resident_bytes() { return status_bytes("VmRSS:"); }
int64_t peak_resident_bytes() { return status_bytes("VmHWM:"); }
int64_t machine_memory_bytes(const char* key) { return status_bytes(key, "/proc/meminfo"); }
void reset_peak_resident() { std::ofstream("/proc/self/clear_refs") << "5"; }

bool malloc_is_tcmalloc() { return MallocExtension_ReleaseFreeMemory != nullptr; }

void keep_freed_host_memory() {
  if (malloc_is_tcmalloc()) return;  // its page heap keeps freed spans for reuse
  mallopt(M_MMAP_THRESHOLD, 1 << 30);
  mallopt(M_TRIM_THRESHOLD, std::numeric_limits<int>::max());  // about 2 GiB: mallopt takes an int
}

void release_freed_host_memory() {
  if (malloc_is_tcmalloc())
    MallocExtension_ReleaseFreeMemory();
  else
    malloc_trim(0);
}

}  // namespace shardtune::common
