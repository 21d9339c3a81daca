// `shardtune status`: where a job stands, from its output directory: the Slurm job's state, the
// last training step, the last committed checkpoint, and the tail of the rank-0 log.
#pragma once

#include <string>

namespace shardtune::launcher {

// `target` is an output directory or a job file. Returns the report text.
std::string status_report(const std::string& target, int log_lines);

}  // namespace shardtune::launcher
