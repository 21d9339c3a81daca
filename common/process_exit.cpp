#include "common/process_exit.h"

#include <spdlog/spdlog.h>

#include <cstdio>
#include <cstdlib>
#include <iostream>

namespace shardtune::common {

void exit_after_flush(int code) {
  spdlog::shutdown();
  std::cout.flush();
  std::cerr.flush();
  std::fflush(nullptr);
  std::_Exit(code);
}

}  // namespace shardtune::common
