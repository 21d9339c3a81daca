// Charts of metrics.jsonl through gnuplot.
#include "launcher/plot.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <stdlib.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>

#include "common/error.h"
#include "common/shell_words.h"
#include "common/subprocess.h"

namespace shardtune::launcher {
namespace {

namespace fs = std::filesystem;
using common::ErrorKind;

constexpr double kGiB = 1.0 / (1 << 30);

// One run's records as gnuplot data files: train.tsv (step, loss, lr, tokens/s, peak RSS GiB,
// GPU peak reserved GiB, GPU peak allocated GiB, DPO's reward margin and accuracy; "?" where
// missing) and eval.tsv (step, loss, DPO's reward margin and accuracy).
std::string cell(const nlohmann::json& r, const char* key, double scale = 1.0) {
  const auto it = r.find(key);
  return it != r.end() && it->is_number() ? fmt::format("{}", scale * it->get<double>()) : "?";
}

// Runs of several data sources also get sources.tsv (step, then each source's samples trained so
// far) and, when sources are validated apart, eval-sources.tsv (step, then each one's loss).
struct RunData {
  std::string label;
  std::string train, eval;
  bool has_eval = false, has_gpu = false, has_dpo = false;
  std::string sources_file, val_sources_file;
  std::vector<std::string> sources, val_sources;  // names, in column order
};

// The per-source data files of a run: each source's cumulative samples per step, and each
// source's validation loss per evaluation. Names in order of first appearance.
void write_source_files(const std::vector<nlohmann::json>& records, RunData& data) {
  std::map<std::string, int64_t> total;
  std::ofstream counts(data.sources_file), losses(data.val_sources_file);
  for (const nlohmann::json& r : records) {
    const bool step = r.contains("step");
    const auto it = r.find(step ? "sources" : "val_sources");
    if (it == r.end() || !it->is_object()) continue;
    std::vector<std::string>& names = step ? data.sources : data.val_sources;
    for (const auto& [name, value] : it->items())
      if (std::find(names.begin(), names.end(), name) == names.end()) names.push_back(name);
    for (std::string& name : names)  // the key in the file; a title shows it without control characters
      for (char& c : name)
        if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '?';
    std::string row = cell(r, step ? "step" : "after_step");
    for (const std::string& name : names) {
      if (step) {
        total[name] += it->contains(name) && (*it)[name].is_number_integer() ? (*it)[name].get<int64_t>() : 0;
        row += fmt::format("\t{}", total[name]);
      } else {
        row += "\t" + (it->contains(name) ? cell((*it)[name], "val_loss") : std::string("?"));
      }
    }
    (step ? counts : losses) << row << "\n";
  }
}

// A gnuplot single-quoted string: a quote inside is doubled.
std::string quoted(const std::string& s) {
  std::string out = "'";
  for (const char c : s) out += c == '\'' ? std::string("''") : std::string(1, c);
  return out + "'";
}

std::string label_of(const std::string& run) {
  std::string name = fs::path(run).lexically_normal().filename().string();
  if (name.empty() || name == ".") name = fs::absolute(run).lexically_normal().parent_path().filename().string();
  for (char& c : name)
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '?';
  return name;
}

RunData read_run(const std::string& run, const fs::path& data_dir, size_t index) {
  const std::string path = run + "/metrics.jsonl";
  std::ifstream in(path);
  ST_CHECK(in.good(), ErrorKind::kUsage, "{}: no metrics.jsonl (is {} a run's output directory?)", path, run);
  // Data files in the scratch folder, by absolute paths: gnuplot runs a data file name that starts
  // with '<' as a command.
  RunData data{label_of(run), fs::absolute(data_dir / fmt::format("train{}.tsv", index)).string(),
               fs::absolute(data_dir / fmt::format("eval{}.tsv", index)).string()};
  data.sources_file = fs::absolute(data_dir / fmt::format("sources{}.tsv", index)).string();
  data.val_sources_file = fs::absolute(data_dir / fmt::format("eval-sources{}.tsv", index)).string();
  std::ofstream train(data.train), eval(data.eval);
  int64_t steps = 0;
  std::string line;
  std::vector<nlohmann::json> records;
  while (std::getline(in, line)) {
    nlohmann::json r = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (!r.is_object()) continue;  // a line cut short by a kill
    records.push_back(r);
    if (r.contains("step")) {
      ++steps;
      data.has_gpu = data.has_gpu || r.contains("gpu_peak_reserved_bytes");
      data.has_dpo = data.has_dpo || r.contains("rewards/margins");
      train << fmt::format("{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\n", cell(r, "step"), cell(r, "loss"), cell(r, "lr"),
                           cell(r, "tokens_per_second"), cell(r, "peak_rss_bytes", kGiB),
                           cell(r, "gpu_peak_reserved_bytes", kGiB), cell(r, "gpu_peak_allocated_bytes", kGiB),
                           cell(r, "rewards/margins"), cell(r, "rewards/accuracies"));
    } else if (r.contains("val_loss")) {
      data.has_eval = true;
      eval << fmt::format("{}\t{}\t{}\t{}\n", cell(r, "after_step"), cell(r, "val_loss"),
                          cell(r, "val_rewards/margins"), cell(r, "val_rewards/accuracies"));
    }
  }
  ST_CHECK(steps > 0, ErrorKind::kUsage, "{}: no training records yet, nothing to plot", path);
  write_source_files(records, data);
  ST_CHECK(train.good() && eval.good(), ErrorKind::kIo, "cannot write plot data under {}", data_dir.string());
  return data;
}

// A temporary directory for the data files and script, removed with everything in it.
class ScratchDir {
 public:
  ScratchDir() {
    std::string pattern = (fs::temp_directory_path() / "shardtune-plot.XXXXXX").string();
    ST_CHECK(::mkdtemp(pattern.data()) != nullptr, ErrorKind::kIo, "cannot create a directory like {}", pattern);
    path_ = pattern;
  }
  ~ScratchDir() {
    std::error_code ignored;
    fs::remove_all(path_, ignored);
  }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

struct Chart {
  std::string file, title, ylabel;
};

// The plot command of one chart: a line per run (and per run's extra series), colours by run.
std::string plot_command(const std::vector<RunData>& runs, const std::string& which) {
  std::vector<std::string> parts;
  for (size_t i = 0; i < runs.size(); ++i) {
    const RunData& r = runs[i];
    const std::string colour = fmt::format("lc {}", i + 1);
    const std::string name = runs.size() > 1 ? r.label + " " : "";
    auto series = [&](const std::string& file, int column, const std::string& style, const std::string& title) {
      parts.push_back(fmt::format("{} using 1:{} with {} {} title {}", quoted(file), column, style, colour,
                                  quoted(name + title)));
    };
    if (which == "loss") {
      series(r.train, 2, "lines lw 1.5", "train");
      if (r.has_eval) series(r.eval, 2, "linespoints lw 2 dt 2 pt 7 ps 1.2", "validation");
      for (size_t k = 0; k < r.val_sources.size(); ++k)
        parts.push_back(fmt::format("{} using 1:{} with linespoints lw 1 dt 3 pt {} {} title {}", quoted(r.val_sources_file),
                                    k + 2, k + 4, colour, quoted(name + "validation " + r.val_sources[k])));
    } else if (which == "sources") {
      for (size_t k = 0; k < r.sources.size(); ++k)
        parts.push_back(fmt::format("{} using 1:{} with lines lw 1.5 dt {} {} title {}", quoted(r.sources_file), k + 2,
                                    k + 1, colour, quoted(name + r.sources[k])));
    } else if (which == "lr") {
      series(r.train, 3, "lines lw 1.5", "learning rate");
    } else if (which == "margins" || which == "accuracies") {
      if (!r.has_dpo) continue;
      const int column = which == "margins" ? 8 : 9;
      series(r.train, column, "lines lw 1.5", "train");
      if (r.has_eval) series(r.eval, column - 5, "linespoints lw 2 dt 2 pt 7 ps 1.2", "validation");
    } else if (which == "throughput") {
      series(r.train, 4, "lines lw 1.5", "tokens/s");
    } else {
      series(r.train, 5, "lines lw 1.5", "peak host RSS (largest rank)");
      if (r.has_gpu) {
        series(r.train, 6, "lines lw 1.5 dt 2", "GPU peak reserved");
        series(r.train, 7, "lines lw 1.5 dt 3", "GPU peak allocated");
      }
    }
  }
  std::string out = "plot ";
  for (size_t i = 0; i < parts.size(); ++i) out += (i ? ", \\\n     " : "") + parts[i];
  return out + "\n";
}

}  // namespace

std::vector<std::string> plot_runs(const PlotOptions& options) {
  ST_CHECK(!options.runs.empty(), ErrorKind::kUsage, "plot: name at least one run's output directory");
  std::string out_dir = options.out_dir;
  if (out_dir.empty()) {
    ST_CHECK(options.runs.size() == 1, ErrorKind::kUsage,
             "plot: {} runs compared in one chart need --out DIR for the PNGs", options.runs.size());
    out_dir = options.runs[0] + "/plots";
  }
  ST_CHECK(common::is_one_line(out_dir), ErrorKind::kUsage, "plot: --out {:?} holds control characters",
           out_dir);
  ScratchDir scratch;
  std::vector<RunData> runs;
  for (size_t i = 0; i < options.runs.size(); ++i) runs.push_back(read_run(options.runs[i], scratch.path(), i));
  std::error_code ec;
  fs::create_directories(out_dir, ec);
  ST_CHECK(!ec, ErrorKind::kIo, "cannot create {}: {}", out_dir, ec.message());

  std::vector<std::pair<std::string, Chart>> charts = {
      {"loss", {"loss.png", "Loss", "loss"}},
      {"lr", {"lr.png", "Learning rate", "learning rate"}},
      {"throughput", {"throughput.png", "Throughput", "tokens/s (all ranks)"}},
      {"memory", {"memory.png", "Peak memory per step", "GiB"}},
  };
  // DPO runs: the reward margin and the share of pairs whose chosen reward is the higher (TRL's
  // rewards/margins and rewards/accuracies).
  if (std::any_of(runs.begin(), runs.end(), [](const RunData& r) { return r.has_dpo; })) {
    charts.push_back({"margins", {"margins.png", "DPO reward margin (chosen - rejected)", "rewards/margins"}});
    charts.push_back({"accuracies", {"accuracies.png", "DPO reward accuracy", "rewards/accuracies"}});
  }
  // Several data sources: the samples of each trained so far.
  if (std::any_of(runs.begin(), runs.end(), [](const RunData& r) { return !r.sources.empty(); }))
    charts.push_back({"sources", {"sources.png", "Samples trained per data source", "samples"}});
  std::string script = fmt::format(
      "set terminal pngcairo size {},{} noenhanced font ',11'\n"
      "set datafile separator '\\t'\nset datafile missing '?'\n"
      "set grid\nset key top right\nset xlabel 'step'\nset yrange [0:*]\n",
      options.width, options.height);
  std::vector<std::string> written;
  for (const auto& [which, chart] : charts) {
    const std::string png = (fs::path(out_dir) / chart.file).string();
    // Absolute, so it starts with '/': gnuplot takes an output name that starts with '|' as a
    // command to pipe into, and the folder name is the user's.
    script += fmt::format("set output {}\nset title {}\nset ylabel {}\n", quoted(fs::absolute(png).string()),
                          quoted(chart.title), quoted(chart.ylabel));
    if (which == "lr") script += "set format y '%.1e'\n";
    if (which == "margins") script += "set yrange [*:*]\n";  // a margin may be below 0
    if (which == "accuracies") script += "set yrange [0:1]\n";
    script += plot_command(runs, which);
    if (which == "lr") script += "set format y '% h'\n";
    if (which == "margins" || which == "accuracies") script += "set yrange [0:*]\n";
    written.push_back(png);
  }
  script += "unset output\n";
  const std::string script_path = (scratch.path() / "plot.gp").string();
  std::ofstream(script_path) << script;

  common::CommandResult r;
  try {
    r = common::run_command({"gnuplot", script_path});
  } catch (const common::Error&) {
    common::raise(ErrorKind::kUsage, "plot: gnuplot is not installed: install Debian's gnuplot-nox (scripts/setup.sh does)");
  }
  ST_CHECK(r.exit_code == 0, ErrorKind::kIo, "plot: gnuplot exited {}: {}", r.exit_code, r.err);
  for (const std::string& png : written)
    ST_CHECK(fs::is_regular_file(png) && fs::file_size(png) > 0, ErrorKind::kIo, "plot: gnuplot did not write {}", png);
  return written;
}

}  // namespace shardtune::launcher
