// shardtune: the command users type on a login node. Never links LibTorch, MPI or CUDA.
#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <optional>

#include "checkpoint/commit.h"
#include "common/error.h"
#include "common/subprocess.h"
#include "common/file_io.h"
#include "common/log.h"
#include "common/malloc_pages.h"
#include "common/process_memory.h"
#include "common/job/job_checks.h"
#include "common/job/job_loader.h"
#include "common/job/schema.h"
#include "common/job/job_writer.h"
#include "common/exit_codes.h"
#include "launcher/local_run.h"
#include "launcher/memory_plan.h"
#include "launcher/plan.h"
#include "launcher/plot.h"
#include "launcher/status.h"
#include "launcher/stop_relay.h"
#include "launcher/submit.h"
#include "launcher/writer_guard.h"

namespace {

using namespace shardtune;

constexpr int kJobErrorExit = common::kExitJobError;

// The model's shape where this machine can read it: the preset's, a --model-config file, or the
// model folder's config.json. Elsewhere (a folder only the cluster's nodes see) every rank checks
// the same bounds before training.
std::optional<job::ModelFacts> readable_model_facts(const job::Job& job, const std::string& model_config) {
  std::string file = model_config;
  if (file.empty() && job.model.preset != job::ModelPreset::kNone) {
    return job::ModelFacts{fmt::format("preset \"{}\"", job::enum_name(job.model.preset)),
                           launcher::job_model_config(job).num_hidden_layers};
  }
  if (file.empty()) file = job.model.path + "/config.json";
  std::error_code ec;
  if (!std::filesystem::is_regular_file(file, ec)) return std::nullopt;
  return job::ModelFacts{file, model::LlamaConfig::from_file(file).num_hidden_layers};
}

// Loads and validates, against the model too where its config is readable; prints warnings to
// stderr. Throws JobError listing every error.
job::Job resolve(const std::string& path, const std::vector<std::string>& overrides,
                 const std::string& model_config = "") {
  job::LoadedJob loaded = job::load_job_file(path, overrides);
  if (!loaded.diagnostics.has_errors()) {
    if (auto facts = readable_model_facts(loaded.job, model_config))
      job::check_against_model(loaded.job, *facts, loaded.sources, path, loaded.diagnostics);
    job::check_launch_paths(loaded.job, loaded.sources, path, loaded.diagnostics);
  }
  if (loaded.diagnostics.has_errors()) throw job::JobError(loaded.diagnostics);
  std::cerr << loaded.diagnostics.to_string();
  return loaded.job;
}

int cmd_validate(const std::string& path, const std::vector<std::string>& overrides) {
  std::cout << job::to_toml(resolve(path, overrides));
  return 0;
}

// `run` starts the ranks on this machine with mpirun: the keys only a submitted job uses (the
// allocation, srun) are named once, so that nobody believes they took effect.
void note_submit_only_keys(const job::Job& job) {
  const job::Job defaults;
  std::vector<std::string> keys;
  for (const char* section : {"slurm", "launch"}) {
    for (const job::FieldSpec& f : job::find_section(section)->fields) {
      const std::string dotted = f.dotted();
      const bool submit_only = std::string(section) == "slurm"
                                   ? dotted != "slurm.nodes" && dotted != "slurm.ntasks_per_node" &&
                                         dotted != "slurm.gpus_per_node"
                                   : dotted == "launch.launcher" || dotted == "launch.srun_mpi" ||
                                         dotted == "launch.extra_srun_options";
      if (submit_only && f.literal(job) != f.literal(defaults)) keys.push_back(dotted);
    }
  }
  if (!keys.empty())
    std::cerr << fmt::format("shardtune: note: run starts the ranks on this machine with mpirun; only submit uses {}\n",
                             fmt::join(keys, ", "));
}

// A node's host memory for a CPU job's plan (and a GPU job's with cpu_offload): --node-memory, else
// this machine's.
std::optional<launcher::NodeMemory> node_memory(const std::string& text) {
  if (!text.empty()) {
    const std::optional<double> bytes = launcher::parse_memory_size(text);
    ST_CHECK(bytes.has_value(), common::ErrorKind::kUsage, "--node-memory {:?} is not a size like 256GiB", text);
    return launcher::NodeMemory{*bytes, "--node-memory's", ""};
  }
  const int64_t total = common::machine_memory_bytes("MemTotal:");
  if (total <= 0) return std::nullopt;
  return launcher::NodeMemory{static_cast<double>(total), "this machine's", " (MemTotal)"};
}

// Before a local CPU run: a warning where its ranks' planned host memory exceeds what this machine
// has available now (they would be killed for memory, one after another, mid-run).
void warn_if_ranks_exceed_memory(const job::Job& job) {
  try {
    const launcher::MemoryPlan plan = launcher::plan_memory(job, launcher::job_model_config(job));
    const double need = launcher::node_host_bytes(plan);
    const double available = static_cast<double>(common::machine_memory_bytes("MemAvailable:"));
    if (need > 0 && available > 0 && need > available)
      std::cerr << fmt::format(
          "shardtune: warning: the {} rank(s) need about {:.2f} GiB of host memory at their peak ({:.2f} GiB each, "
          "`shardtune plan`), and this machine has {:.2f} GiB available: they may be killed for memory\n",
          plan.ranks_per_node, need / (1 << 30), need / static_cast<double>(plan.ranks_per_node) / (1 << 30),
          available / (1 << 30));
  } catch (const std::exception& e) {
    std::cerr << fmt::format("shardtune: warning: no memory plan: {}\n", e.what());
  }
}

int cmd_run(const std::string& path, std::vector<std::string> overrides, int ranks, bool dry_run) {
  if (ranks > 0) {
    // -n decides the world: one node of `ranks` ranks, after the job file and its overrides.
    for (std::string& o : launcher::local_run_overrides(ranks)) overrides.push_back(std::move(o));
  }
  job::Job job = resolve(path, overrides);
  if (ranks <= 0 && job.slurm.nodes > 1) {
    for (std::string& o : launcher::local_run_overrides(static_cast<int>(job.slurm.world_size())))
      overrides.push_back(std::move(o));
    job = resolve(path, overrides);
  }
  // The resolved job names its files absolutely, as a submitted one does: `status` and the tools
  // then find them from any directory.
  job = launcher::with_absolute_paths(std::move(job), std::filesystem::current_path().string());
  if (!dry_run) note_submit_only_keys(job);
  // Absolute, so that an output_dir such as "-x" never reads as an option of mpirun or the rank.
  const std::string resolved_path = (std::filesystem::absolute(job.job.output_dir) / "job.toml").string();
  launcher::LocalRunOptions options{common::sibling_executable("shardtune-rank"), resolved_path, ::geteuid() == 0};
  const std::vector<std::string> argv = launcher::local_mpirun_argv(job, options);
  std::string line;
  for (const std::string& a : argv) line += (line.empty() ? "" : " ") + a;
  if (dry_run) {
    std::cout << line << "\n";
    return 0;
  }
  // One writer per output directory: no queued or running Slurm job of it, and its lock held by
  // this process and mpirun (inherited across fork and exec) until the last process of the run exits.
  launcher::refuse_if_slurm_job_active(job.job.output_dir);
  // A CPU job's ranks hold their tensors in this machine's memory (with device "auto", where it has
  // no NVIDIA GPU: on one, they would train on it).
  if (job.launch.device == job::Device::kCpu ||
      (job.launch.device == job::Device::kAuto && !std::filesystem::exists("/dev/nvidiactl")))
    warn_if_ranks_exceed_memory(job);
  std::vector<common::DirLock> locks = launcher::lock_job_dirs(job, launcher::holder_note("shardtune run"));
  for (common::DirLock& lock : locks) lock.keep_across_exec();
  common::write_file_atomically(resolved_path, job::to_toml(job));
  std::cerr << "shardtune: " << line << "\n";
  // Rank 0's stderr reaches this terminal through mpirun's pipes: tell it, so it draws progress bars.
  if (common::is_terminal(STDERR_FILENO))
    ::setenv(common::kTerminalColumnsEnv, std::to_string(common::terminal_columns(STDERR_FILENO)).c_str(), 1);
  // The ranks' malloc on huge pages (see common/malloc_pages.h); mpirun passes its environment on.
  const char* tunables = std::getenv("GLIBC_TUNABLES");
  ::setenv("GLIBC_TUNABLES", common::tunables_with_huge_pages(tunables ? tunables : "").c_str(), 1);
  // A stop (Ctrl-C, TERM) becomes the ranks' checkpoint-and-stop request, and the run exits with
  // their code: 75 after a stop with a committed checkpoint (launcher/stop_relay.h).
  return launcher::run_relaying_stops(argv, std::filesystem::path(options.rank_exe).filename().string().substr(0, 15));
}

int cmd_submit(const std::string& path, const std::vector<std::string>& overrides, bool dry_run) {
  const job::Job job = launcher::with_absolute_paths(resolve(path, overrides), std::filesystem::current_path().string());
  return launcher::submit(job, {common::sibling_executable("shardtune-rank"), common::sibling_executable("shardtune"),
                                dry_run});
}

int cmd_plan(const std::string& path, const std::vector<std::string>& overrides, const std::string& memory_text,
             const std::string& node_text, const std::string& model_config, bool as_json) {
  const job::Job job = resolve(path, overrides, model_config);
  std::optional<double> limit;
  if (!memory_text.empty()) {
    limit = launcher::parse_memory_size(memory_text);
    ST_CHECK(limit.has_value(), common::ErrorKind::kUsage, "--gpu-memory {:?} is not a size like 80GiB", memory_text);
  } else if (job.launch.gpu_memory_gib > 0) {
    limit = job.launch.gpu_memory_gib * (1 << 30);
  }
  const model::LlamaConfig config =
      model_config.empty() ? launcher::job_model_config(job) : model::LlamaConfig::from_file(model_config);
  const std::optional<launcher::NodeMemory> node = node_memory(node_text);
  std::cout << (as_json ? launcher::plan_json(job, config, limit, node)
                        : launcher::plan_report(job, config, limit, node));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"shardtune: fine-tune Llama-class models with FSDP/HSDP on Slurm clusters"};
  app.require_subcommand(1);
  std::string path;
  std::vector<std::string> overrides;
  int ranks = 0;
  bool dry_run = false;

  auto* validate = app.add_subcommand("validate", "Check a job file; print the resolved job or every error");
  validate->add_option("job", path, "Job file (TOML)")->required();
  validate->add_option("--set", overrides, "Override a field: section.key=value (repeatable)");

  auto* run = app.add_subcommand("run", "Run the job on this machine, ranks started by mpirun");
  run->add_option("job", path, "Job file (TOML)")->required();
  run->add_option("-n,--ranks", ranks, "Number of ranks (default: the job's world size)")->check(CLI::Range(1, 4096));
  run->add_option("--set", overrides, "Override a field: section.key=value (repeatable)");
  run->add_flag("--dry-run", dry_run, "Print the mpirun command instead of running it");

  auto* submit = app.add_subcommand("submit", "Validate the job, write its sbatch script and submit it; prints the job id");
  submit->add_option("job", path, "Job file (TOML)")->required();
  submit->add_option("--set", overrides, "Override a field: section.key=value (repeatable)");
  submit->add_flag("--dry-run", dry_run, "Print the sbatch script and the exact sbatch argv; write and submit nothing");

  std::string status_target = ".";
  int log_lines = 10;
  auto* status = app.add_subcommand("status", "Show a job's Slurm state, last step, last checkpoint and rank-0 log");
  status->add_option("output_dir", status_target, "The job's output directory, or its job file (default: .)");
  status->add_option("--lines", log_lines, "Lines of the rank-0 log to show")->check(CLI::Range(0, 10000));

  std::string memory_text, node_text;
  bool as_json = false;
  auto* plan = app.add_subcommand("plan", "Per-rank memory of the job, part by part; whether it fits, and what would");
  plan->add_option("job", path, "Job file (TOML)")->required();
  plan->add_option("--set", overrides, "Override a field: section.key=value (repeatable)");
  plan->add_option("--gpu-memory", memory_text,
                   "Memory of one rank's device, e.g. 80GiB (default: [launch] gpu_memory_gib; none on a CPU job)");
  plan->add_option("--node-memory", node_text,
                   "Host memory of one node, e.g. 256GiB, that a CPU job's ranks share (default: this machine's)");
  std::string model_config;
  plan->add_option("--model-config", model_config,
                   "A config.json giving the model's shapes, when the job's model folder is not on this machine");
  plan->add_flag("--json", as_json, "Print the plan as JSON");

  launcher::PlotOptions plot_options;
  auto* plot = app.add_subcommand("plot", "Draw PNG charts of runs' metrics.jsonl: loss, learning rate, tokens/s, memory");
  plot->add_option("runs", plot_options.runs, "Output directories of the runs to plot (several: compared in one chart)")
      ->required();
  plot->add_option("-o,--out", plot_options.out_dir, "Directory for the PNGs (default: RUN/plots for one run)");
  plot->add_option("--width", plot_options.width, "Width in pixels")->check(CLI::Range(320, 8000));
  plot->add_option("--height", plot_options.height, "Height in pixels")->check(CLI::Range(240, 8000));

  auto* schema = app.add_subcommand("schema", "Print the job-file reference (docs/job-file.md)");

  auto* generate = app.add_subcommand("generate", "Generate text with a model, a checkpoint or a job's output folder "
                                                  "(shardtune-generate; `shardtune generate --help` for its options)");
  generate->prefix_command();
  generate->allow_extras();
  generate->set_help_flag();  // --help goes to shardtune-generate

  // For the batch script: the newest committed checkpoint of a directory as the ranks resume it,
  // "<commit number> <step>" ("0 0" when there is none). A start made progress when the number grew.
  std::string position_dir;
  auto* position = app.add_subcommand("checkpoint-position", "")->group("");
  position->add_option("dir", position_dir, "Checkpoint directory")->required();

  CLI11_PARSE(app, argc, argv);
  try {
    if (validate->parsed()) return cmd_validate(path, overrides);
    if (run->parsed()) return cmd_run(path, overrides, ranks, dry_run);
    if (submit->parsed()) return cmd_submit(path, overrides, dry_run);
    if (status->parsed()) {
      std::cout << launcher::status_report(status_target, log_lines);
      return 0;
    }
    if (plan->parsed()) return cmd_plan(path, overrides, memory_text, node_text, model_config, as_json);
    if (plot->parsed()) {
      for (const std::string& png : launcher::plot_runs(plot_options)) std::cout << png << "\n";
      return 0;
    }
    if (position->parsed()) {
      const checkpoint::CheckpointPosition newest = checkpoint::newest_position(position_dir);
      std::cout << newest.commit << " " << newest.step << "\n";
      return 0;
    }
    if (generate->parsed()) {
      std::vector<std::string> argv{common::sibling_executable("shardtune-generate")};
      for (const std::string& a : generate->remaining()) argv.push_back(a);
      launcher::exec_argv(argv);
    }
    if (schema->parsed()) {
      std::cout << job::schema_markdown();
      return 0;
    }
  } catch (const job::JobError& e) {
    std::cerr << e.what();
    std::cerr << fmt::format("shardtune: {} error(s) in the job; nothing was run\n",
                             std::count_if(e.diagnostics().all().begin(), e.diagnostics().all().end(),
                                           [](const job::Diagnostic& d) { return d.severity == job::Severity::kError; }));
    return kJobErrorExit;
  } catch (const std::exception& e) {
    std::cerr << "shardtune: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
