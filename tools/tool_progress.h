// The command-line tools' progress: a bar on stderr when it is a terminal, plain lines there
// otherwise, and a closing line that names the process's peak memory.
#pragma once

#include <fmt/format.h>
#include <unistd.h>

#include <cstdint>
#include <string>

#include "common/process_memory.h"
#include "common/progress.h"

namespace shardtune::tools {

inline common::ProgressOptions tool_progress(std::string label, int64_t total,
                                             common::ProgressUnit unit = common::ProgressUnit::kBytes,
                                             std::string noun = "items") {
  common::ProgressOptions o;
  o.label = std::move(label);
  o.total = total;
  o.unit = unit;
  o.noun = std::move(noun);
  o.bar_fd = common::is_terminal(STDERR_FILENO) ? STDERR_FILENO : -1;
  return o;
}

// ", peak memory 812 MiB": the end of every tool's closing line (bench/ckpt.sh reads it).
inline std::string peak_memory_note() {
  return fmt::format(", peak memory {:.0f} MiB", static_cast<double>(common::peak_resident_bytes()) / (1 << 20));
}

}  // namespace shardtune::tools
