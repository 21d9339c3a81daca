// Local runs through mpirun, started by argv (never through a shell).
#include "launcher/local_run.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "common/error.h"

namespace shardtune::launcher {

using common::ErrorKind;

std::vector<std::string> local_mpirun_argv(const job::Job& job, const LocalRunOptions& options) {
  std::vector<std::string> argv = {"mpirun", "-np", std::to_string(job.slurm.world_size())};
  if (options.allow_run_as_root) argv.push_back("--allow-run-as-root");
  // A local run may start more ranks than cores (tests do): no binding, no refusal.
  for (const char* a : {"--oversubscribe", "--bind-to", "none"}) argv.emplace_back(a);
  // No input to rank 0: mpirun runs in a process group of its own (launcher/stop_relay.h), where
  // reading the terminal would stop it.
  for (const char* a : {"--stdin", "none"}) argv.emplace_back(a);
  // Keep MPI's traffic on this machine.
  for (const char* a : {"--mca", "btl_tcp_if_include", "lo", "--mca", "oob_tcp_if_include", "lo"}) argv.emplace_back(a);
  argv.insert(argv.end(), job.launch.extra_mpirun_options.begin(), job.launch.extra_mpirun_options.end());
  argv.push_back(options.rank_exe);
  argv.push_back(options.job_file);
  return argv;
}

std::vector<std::string> local_run_overrides(int ranks) {
  return {"slurm.nodes=1", fmt::format("slurm.ntasks_per_node={}", ranks), "slurm.gpus_per_node=0"};
}

void exec_argv(const std::vector<std::string>& argv) {
  std::vector<char*> c_argv;
  for (const std::string& a : argv) c_argv.push_back(const_cast<char*>(a.c_str()));
  c_argv.push_back(nullptr);
  std::fflush(nullptr);
  ::execvp(c_argv[0], c_argv.data());
  common::raise(ErrorKind::kIo, fmt::format("cannot start {}: {}", argv[0], std::strerror(errno)));
}

}  // namespace shardtune::launcher
