// Where a TOML node stands in the job file, for diagnostics.
#pragma once

#include <string>
#include <string_view>

#include <toml++/toml.h>

#include "common/job/diagnostics.h"

namespace shardtune::job {

// Diagnostics name a `--set` override by its argument: positions inside it mean nothing.
inline constexpr std::string_view kOverridePrefix = "--set ";

inline SourcePos position_of(const toml::source_region& region, const std::string& fallback_file) {
  SourcePos pos;
  pos.file = region.path ? *region.path : fallback_file;
  if (pos.file.rfind(kOverridePrefix, 0) != 0) {
    pos.line = static_cast<int>(region.begin.line);
    pos.column = static_cast<int>(region.begin.column);
  }
  return pos;
}

}  // namespace shardtune::job
