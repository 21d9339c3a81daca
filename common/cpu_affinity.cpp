// The process's CPU affinity.
#include "common/cpu_affinity.h"

#include <fmt/format.h>
#include <sched.h>

namespace shardtune::common {

std::string CpuAffinity::list() const {
  std::string out;
  for (size_t i = 0; i < cpus.size();) {
    size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) ++j;
    out += fmt::format("{}{}", out.empty() ? "" : ",", j == i ? fmt::format("{}", cpus[i]) : fmt::format("{}-{}", cpus[i], cpus[j]));
    i = j + 1;
  }
  return out;
}

CpuAffinity cpu_affinity() {
  CpuAffinity out;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof set, &set) != 0) return out;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) out.cpus.push_back(c);
  return out;
}

}  // namespace shardtune::common
