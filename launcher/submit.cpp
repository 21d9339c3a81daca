#include "launcher/submit.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include "common/error.h"
#include "common/file_io.h"
#include "common/job/job_writer.h"
#include "launcher/local_run.h"
#include "launcher/plan.h"
#include "launcher/writer_guard.h"
#include "common/subprocess.h"
#include "slurm/sbatch_script.h"

namespace shardtune::launcher {
namespace {

namespace fs = std::filesystem;
using common::ErrorKind;

std::string absolute(const std::string& path, const std::string& cwd) {
  if (path.empty()) return path;
  fs::path p(path);
  if (p.is_relative()) p = fs::path(cwd) / p;
  return p.lexically_normal().string();
}

std::string trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' ')) s.pop_back();
  return s;
}

}  // namespace

job::Job with_absolute_paths(job::Job job, const std::string& cwd) {
  for (std::string* path : {&job.job.output_dir, &job.checkpoint.dir, &job.model.path, &job.peft.from_peft_checkpoint,
                            &job.data.train_file, &job.data.val_file, &job.data.tokenizer, &job.metrics.profiler_dir})
    *path = absolute(*path, cwd);
  for (job::DataSource& source : job.data_sources)
    for (std::string* path : {&source.data.train_file, &source.data.val_file}) *path = absolute(*path, cwd);
  if (job.checkpoint.resume != "auto" && job.checkpoint.resume != "none")
    job.checkpoint.resume = absolute(job.checkpoint.resume, cwd);
  return job;
}

std::string script_path(const job::Job& job) { return slurm::script_file(job.job.output_dir); }
std::string resolved_job_path(const job::Job& job) { return job.job.output_dir + "/job.toml"; }
std::string job_ids_path(const std::string& output_dir) { return slurm::job_ids_file(output_dir); }

std::string last_job_id(const std::string& output_dir) {
  std::ifstream in(job_ids_path(output_dir));
  std::string line, last;
  while (std::getline(in, line))
    if (!trim(line).empty()) last = trim(line);
  return last;
}

namespace {

// The planner's verdict before queueing: a GPU job with [launch] gpu_memory_gib that will not
// fit is reported (with the changes that would make it fit) and still submitted; one that fits
// with blocks recomputed that could keep their activations is told how many.
void warn_if_it_cannot_fit(const job::Job& job) {
  const bool gpu = job.launch.device == job::Device::kCuda ||
                   (job.launch.device == job::Device::kAuto && job.slurm.gpus_per_node > 0);
  if (gpu && job.launch.gpu_memory_gib <= 0)
    std::cerr << "shardtune: warning: no [launch] gpu_memory_gib, so nothing checks that the job fits its GPUs; "
                 "set it to the GPUs' memory (e.g. 80), or see `shardtune plan JOB --gpu-memory 80GiB`\n";
  if (job.launch.gpu_memory_gib <= 0) return;
  try {
    const model::LlamaConfig config = job_model_config(job);
    const double limit = job.launch.gpu_memory_gib * (1 << 30);
    if (plan_memory(job, config).total_bytes > limit)
      std::cerr << "shardtune: warning: the job will not fit its GPUs' memory ([launch] gpu_memory_gib = "
                << job.launch.gpu_memory_gib << ")\n"
                << plan_report(job, config, limit);
    else if (const std::string faster = faster_that_fits(job, config, limit); !faster.empty())
      std::cerr << "shardtune: note: the job fits its GPUs' memory ([launch] gpu_memory_gib = "
                << job.launch.gpu_memory_gib << ") with room for fewer blocks recomputed; " << faster;
  } catch (const std::exception& e) {
    std::cerr << fmt::format("shardtune: warning: no memory plan: {}\n", e.what());
  }
}

// Slurm's own clock against the watchdog's: a node that dies without a network error is found by
// the collective timeout on the ranks, or by slurmctld after SlurmdTimeout, whichever comes first.
// Slurm first means it kills and requeues the job itself, and the resubmission that leaves the
// lost node out never runs. Read from the cluster's `scontrol show config`; no scontrol, no check.
void warn_about_slurm_clock(const job::Job& job) {
  const common::CommandResult r = common::run_command({"scontrol", "show", "config"});
  if (r.exit_code != 0) return;
  std::istringstream lines(r.out);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("SlurmdTimeout", 0) != 0) continue;
    const size_t eq = line.find('=');
    if (eq == std::string::npos) return;
    const double slurmd_timeout = std::strtod(line.c_str() + eq + 1, nullptr);
    // The census after a timeout takes up to 5 s more (runtime/dist/watchdog.cpp).
    if (slurmd_timeout > 0 && job.launch.collective_timeout_s + 5 >= slurmd_timeout)
      std::cerr << fmt::format(
          "shardtune: warning: [launch] collective_timeout_s = {:g} s is not below this cluster's SlurmdTimeout "
          "({:g} s): a node that dies without a network error is then found by Slurm first, which kills and "
          "requeues the job itself, and the resubmission without that node never runs. HINT: set "
          "collective_timeout_s to at most {:g}\n",
          job.launch.collective_timeout_s, slurmd_timeout, std::max(1.0, slurmd_timeout / 2));
    return;
  }
}

}  // namespace

int submit(const job::Job& job, const SubmitOptions& options) {
  warn_if_it_cannot_fit(job);
  warn_about_slurm_clock(job);
  const std::string script = slurm::sbatch_script(job, {options.rank_exe, resolved_job_path(job), options.launcher_exe});
  const std::vector<std::string> argv = slurm::sbatch_argv(script_path(job));
  if (options.dry_run) {
    std::cout << script << "\n# sbatch argv, one element per line:\n";
    for (const std::string& a : argv) std::cout << "#   " << a << "\n";
    std::cout << "# " << common::command_line(argv) << "\n";
    return 0;
  }
  refuse_if_slurm_job_active(job.job.output_dir);
  {
    // Held while the files are written, not across sbatch: the job's first start takes it.
    const std::vector<common::DirLock> locks = lock_job_dirs(job, holder_note("shardtune submit"));
    common::write_file_atomically(resolved_job_path(job), job::to_toml(job));
    common::write_file_atomically(script_path(job), script);
    fs::permissions(script_path(job), fs::perms::owner_exec | fs::perms::group_exec, fs::perm_options::add);
  }

  const common::CommandResult r = common::run_command(argv);
  if (r.exit_code != 0) {
    std::cerr << fmt::format("shardtune: {} failed (exit {}): {}", common::command_line(argv), r.exit_code, r.err);
    return 1;
  }
  // --parsable prints "<id>" or "<id>;<cluster>".
  const std::string out = trim(r.out);
  const std::string id = out.substr(0, out.find(';'));
  ST_CHECK(!id.empty() && id.find_first_not_of("0123456789") == std::string::npos, ErrorKind::kIo,
           "sbatch printed no job id: \"{}\"", out);
  std::ofstream ids(job_ids_path(job.job.output_dir), std::ios::app);
  ids << id << "\n";
  ST_CHECK(ids.flush(), ErrorKind::kIo, "cannot append to {}", job_ids_path(job.job.output_dir));
  std::cerr << fmt::format("shardtune: submitted job {} ({}); log: {}\n", id, common::command_line(argv),
                           fmt::format("{}/slurm-{}.out", job.job.output_dir, id));
  std::cout << id << "\n";
  return 0;
}

}  // namespace shardtune::launcher
