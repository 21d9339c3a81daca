// `shardtune status`: what a job's output directory says about it, from any directory.
#include "launcher/status.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <deque>
#include <filesystem>
#include <fstream>
#include <map>
#include <vector>

#include "common/error.h"
#include "checkpoint/commit.h"
#include "common/job/job_loader.h"
#include "launcher/submit.h"
#include "slurm/job_state.h"

namespace shardtune::launcher {
namespace {

namespace fs = std::filesystem;

std::deque<std::string> tail(const std::string& path, size_t lines) {
  std::deque<std::string> out;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    out.push_back(line);
    if (out.size() > lines) out.pop_front();
  }
  return out;
}

// A number of the record in the given format, or "?" where it is missing or null.
std::string field(const nlohmann::json& r, const char* key, const char* format = "{}", double scale = 1.0) {
  const auto it = r.find(key);
  return it != r.end() && it->is_number() ? fmt::format(fmt::runtime(format), scale * it->get<double>()) : "?";
}

// The newest training and validation records of metrics.jsonl, in words.
std::pair<std::string, std::string> last_metrics(const std::string& output_dir) {
  std::pair<std::string, std::string> out{"none yet", "none yet"};
  bool step_seen = false, eval_seen = false;
  const std::deque<std::string> last = tail(output_dir + "/metrics.jsonl", 64);
  for (auto line = last.rbegin(); line != last.rend() && !(step_seen && eval_seen); ++line) {
    const nlohmann::json r = nlohmann::json::parse(*line, nullptr, /*allow_exceptions=*/false);
    if (!r.is_object()) continue;
    if (!step_seen && r.contains("step")) {
      step_seen = true;
      out.first = fmt::format("{} (epoch {}): loss {}, lr {}, {} tokens/s, {} s/step", field(r, "step"),
                              field(r, "epoch"), field(r, "loss", "{:.4f}"), field(r, "lr", "{:.3e}"),
                              field(r, "tokens_per_second", "{:.0f}"), field(r, "step_seconds", "{:.3f}"));
      constexpr double kGiB = 1.0 / (1 << 30);
      if (r.contains("mfu")) out.first += fmt::format(", MFU {}%", field(r, "mfu", "{:.1f}", 100));
      out.first += fmt::format(", peak RSS {} GiB", field(r, "peak_rss_bytes", "{:.2f}", kGiB));
      if (r.contains("gpu_peak_reserved_bytes"))
        out.first += fmt::format(", GPU peak {} GiB reserved", field(r, "gpu_peak_reserved_bytes", "{:.2f}", kGiB));
    } else if (!eval_seen && r.contains("val_loss")) {
      eval_seen = true;
      out.second = fmt::format("after step {}: loss {}, perplexity {}", field(r, "after_step"),
                               field(r, "val_loss", "{:.4f}"), field(r, "val_perplexity", "{:.3f}"));
    }
  }
  return out;
}

// With several data sources: the samples of each trained over the run (every training record's
// counts) and each one's newest validation loss; empty otherwise.
std::string source_lines(const std::string& output_dir) {
  std::ifstream in(output_dir + "/metrics.jsonl");
  std::vector<std::pair<std::string, int64_t>> trained;
  std::map<std::string, std::string> validated;
  int64_t total = 0;
  for (std::string line; std::getline(in, line);) {
    if (line.find("sources\"") == std::string::npos) continue;  // cheap: most records have none
    const nlohmann::json r = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (!r.is_object()) continue;
    if (auto it = r.find("sources"); it != r.end() && it->is_object()) {
      for (const auto& [name, count] : it->items()) {
        if (!count.is_number_integer()) continue;
        auto at = std::find_if(trained.begin(), trained.end(), [&](const auto& t) { return t.first == name; });
        if (at == trained.end()) at = trained.insert(trained.end(), {name, 0});
        at->second += count.get<int64_t>();
        total += count.get<int64_t>();
      }
    }
    if (auto it = r.find("val_sources"); it != r.end() && it->is_object())
      for (const auto& [name, figures] : it->items())
        validated[name] = fmt::format("{} loss {}", name, field(figures, "val_loss", "{:.4f}"));
  }
  if (trained.empty()) return "";
  std::vector<std::string> parts;
  for (const auto& [name, count] : trained)
    parts.push_back(fmt::format("{} {} ({:.1f}%)", name, count, 100.0 * static_cast<double>(count) / static_cast<double>(total)));
  std::string out = fmt::format("samples trained: {}\n", fmt::join(parts, ", "));
  if (!validated.empty()) {
    std::vector<std::string> v;
    for (const auto& [name, text] : validated) v.push_back(text);
    out += fmt::format("validation by source: {}\n", fmt::join(v, ", "));
  }
  return out;
}

// The checkpoint a start would resume (checkpoint/commit.h's rule, as the ranks apply it).
std::string last_checkpoint(const std::string& checkpoint_dir) {
  const checkpoint::CheckpointPosition newest = checkpoint::newest_position(checkpoint_dir);
  if (newest.dir.empty()) return fmt::format("none under {}", checkpoint_dir);
  return fmt::format("{} (step {})", fs::path(newest.dir).lexically_normal().string(), newest.step);
}

// A path of the resolved job file, as the job meant it: relative paths were relative to the folder
// the job was started in, which is the run directory with the job's own relative output_dir taken
// off its end.
std::string as_meant(const std::string& path, const std::string& job_output_dir, const std::string& run_dir) {
  if (path.empty() || fs::path(path).is_absolute()) return path;
  const auto without_slash = [](fs::path p) { return p.filename().empty() ? p.parent_path() : p; };
  fs::path started = without_slash(fs::absolute(run_dir).lexically_normal());
  for (const fs::path& part : without_slash(fs::path(job_output_dir).lexically_normal()))
    if (part != ".") started = started.parent_path();
  return (started / path).lexically_normal().string();
}

// Slurm job ids are numbers: anything else in the id file is not passed on to scontrol.
bool is_job_id(const std::string& id) {
  return !id.empty() && id.size() <= 20 && id.find_first_not_of("0123456789") == std::string::npos;
}

}  // namespace

std::string status_report(const std::string& target, int log_lines) {
  std::string output_dir = target;
  std::string job_file = target + "/job.toml";
  if (fs::is_regular_file(target)) {
    job_file = target;
    output_dir = job::load_job_or_throw(target, {}, nullptr).job.output_dir;
  }
  ST_CHECK(fs::is_directory(output_dir), common::ErrorKind::kUsage,
           "{} is not a job's output directory (no such directory)", output_dir);
  std::string checkpoint_dir = output_dir + "/checkpoints";
  std::string name = "?";
  std::string job_problem;
  const std::string resolved = output_dir + "/job.toml";
  if (fs::is_regular_file(resolved)) {
    try {
      const job::Job job = job::load_job_or_throw(resolved, {}, nullptr);
      checkpoint_dir = as_meant(job.checkpoint.dir, job.job.output_dir, output_dir);
      name = job.job.name;
    } catch (const std::exception& e) {
      const std::string why = e.what();
      job_problem = fmt::format("job file:        {} cannot be read ({}); checkpoints looked for under {}\n", resolved,
                                why.substr(0, why.find('\n')), checkpoint_dir);
    }
  }
  std::string report = fmt::format("job:             {} ({})\n", name, output_dir) + job_problem;
  const std::string id = last_job_id(output_dir);
  if (id.empty()) {
    report += "slurm job:       none submitted from this directory\n";
  } else if (!is_job_id(id)) {
    report += fmt::format("slurm job:       {} holds {:?}, not a Slurm job id\n", job_ids_path(output_dir),
                          id.substr(0, 64));
  } else {
    const slurm::JobInfo info = slurm::query_job(id);
    if (!info.error.empty()) {
      report += fmt::format("slurm job:       {} (state unknown: {})\n", id, info.error);
    } else if (!info.known) {
      report += fmt::format("slurm job:       {} (no longer known to slurmctld; see {}/slurm-{}.out)\n", id,
                            output_dir, id);
    } else {
      report += fmt::format("slurm job:       {} {} (reason {}, run time {}, restarts {}, exit code {}, nodes {})\n",
                            id, info.field("JobState"), info.field("Reason"), info.field("RunTime"),
                            info.field("Restarts"), info.field("ExitCode"), info.field("NodeList"));
    }
  }
  const auto [step, validation] = last_metrics(output_dir);
  report += fmt::format("last step:       {}\n", step);
  report += fmt::format("last validation: {}\n", validation);
  report += source_lines(output_dir);
  report += fmt::format("last checkpoint: {}\n", last_checkpoint(checkpoint_dir));
  const std::string log = output_dir + "/logs/rank-00000.log";
  const std::deque<std::string> lines = tail(log, static_cast<size_t>(log_lines));
  report += fmt::format("rank-0 log:      {}{}\n", log, lines.empty() ? " (empty or missing)" : "");
  for (const std::string& l : lines) report += "  " + l + "\n";
  return report;
}

}  // namespace shardtune::launcher
