// The CPUs this process may run on (its affinity mask, as the launcher bound it), for the log.
#pragma once

#include <string>
#include <vector>

namespace shardtune::common {

struct CpuAffinity {
  std::vector<int> cpus;  // ascending
  // "0-3,8": the list in /proc/self/status's Cpus_allowed_list style.
  std::string list() const;
};

CpuAffinity cpu_affinity();

}  // namespace shardtune::common
