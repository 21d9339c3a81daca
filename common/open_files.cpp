// Open-file limits (open_files.h).
#include "common/open_files.h"

#include <fmt/format.h>
#include <sys/resource.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace shardtune::common {

int64_t raise_open_file_limit() {
  rlimit lim{};
  if (::getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur < lim.rlim_max) {
    lim.rlim_cur = lim.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &lim);  // refused: the soft limit stays, and the share follows it
  }
  return open_file_limit();
}

int64_t open_file_limit() {
  rlimit lim{};
  if (::getrlimit(RLIMIT_NOFILE, &lim) != 0 || lim.rlim_cur == RLIM_INFINITY) return int64_t(1) << 20;
  return static_cast<int64_t>(lim.rlim_cur);
}

size_t open_file_share() { return static_cast<size_t>(std::max<int64_t>(4, (open_file_limit() - 64) / 8)); }

std::string open_failure(const std::string& path, int error) {
  if (error == EMFILE || error == ENFILE)
    return fmt::format("cannot open {}: {} (this process may hold {} open files: raise `ulimit -n`)", path,
                       std::strerror(error), open_file_limit());
  return fmt::format("cannot open {}: {}", path, std::strerror(error));
}

}  // namespace shardtune::common
