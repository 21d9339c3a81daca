// Rank-aware logging: every line names rank, node and host; rank 0 speaks on the console, every
// rank writes everything into its own file under the job's output directory.
#pragma once

#include <spdlog/common.h>
#include <spdlog/logger.h>

#include <memory>
#include <string>

#include "common/error.h"
#include "common/progress.h"

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

// The same lines into this rank's file alone (nothing on the console), for what the console shows
// another way (a progress bar). Without a file, a logger that drops everything.
std::shared_ptr<spdlog::logger> file_only_logger();

// Set by `shardtune run` for its ranks when its own stderr is a terminal, to that terminal's
// width: rank 0's stderr is then a pipe through mpirun to it, and may carry a progress bar.
inline constexpr const char* kTerminalColumnsEnv = "SHARDTUNE_TERMINAL_COLUMNS";

// A progress report of this rank (rank 0 reports the job's long phases): a bar on the console when
// it is a terminal, directly or through `shardtune run`, with the plain lines in the rank's file;
// otherwise plain lines logged at info on both. The closing line is logged at info.
ProgressOptions logged_progress(std::string label, int64_t total, ProgressUnit unit = ProgressUnit::kBytes,
                                std::string noun = "items");

// Path of a rank's log file under an output directory.
std::string rank_log_path(const std::string& output_dir, int rank);

}  // namespace shardtune::common
