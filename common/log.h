// Rank-aware logging: every line names rank, node and host; rank 0 speaks on the console, every
// rank writes everything into its own file under the job's output directory.
#pragma once

#include <spdlog/common.h>
#include <spdlog/logger.h>

#include <memory>
#include <string>

#include "common/error.h"

namespace shardtune::common {

struct LogOptions {
  std::string output_dir;                                // "" = no per-rank file
  spdlog::level::level_enum console_level = spdlog::level::info;  // on rank 0
  spdlog::level::level_enum other_ranks_console_level = spdlog::level::warn;
  spdlog::level::level_enum file_level = spdlog::level::debug;
};

// The prefix every line carries: "rank 3/4 node 1 host n2".
std::string log_prefix(const ProcessIdentity& id);

// Builds a logger whose lines carry the identity; the caller supplies the sinks.
std::shared_ptr<spdlog::logger> make_logger(const ProcessIdentity& id, spdlog::sinks_init_list sinks);

// Installs the default logger for this process (console + logs/rank-NNNNN.log). Returns the path
// of the per-rank file, or "" when output_dir is empty.
std::string init_logging(const LogOptions& options);

// Path of a rank's log file under an output directory.
std::string rank_log_path(const std::string& output_dir, int rank);

}  // namespace shardtune::common
