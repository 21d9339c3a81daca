// Other programs run by argv, never through a shell: Slurm's commands, gnuplot, the tokenizer
// conversion.
#pragma once

#include <string>
#include <vector>

namespace shardtune::common {

struct CommandResult {
  int exit_code = 0;  // 128 + signal when the command was killed
  std::string out;
  std::string err;
};

// Runs argv[0] (searched in PATH) with the given arguments and waits for it. Throws
// common::Error(kIo) when it cannot be started at all.
CommandResult run_command(const std::vector<std::string>& argv);

// "sbatch --parsable /x/y.sh": for messages.
std::string command_line(const std::vector<std::string>& argv);

// The path of program `name` installed beside this process's own executable (shardtune-rank next
// to shardtune). Throws Error(kIo) when it is not there.
std::string sibling_executable(const std::string& name);

}  // namespace shardtune::common
