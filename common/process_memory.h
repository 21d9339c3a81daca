// This process's resident memory from /proc/self/status (Linux): current and peak, and a reset
// of the peak, for memory bounds in tests, benchmarks and logs.
#pragma once

#include <cstdint>

namespace shardtune::common {

int64_t resident_bytes();       // VmRSS
int64_t peak_resident_bytes();  // VmHWM: the peak since start or since reset_peak_resident()
void reset_peak_resident();     // writes 5 to /proc/self/clear_refs (Linux 4.0+)

}  // namespace shardtune::common
