// `shardtune plot RUN_DIR [RUN_DIR...]`: PNG charts of runs' metrics.jsonl, drawn by gnuplot
// (Debian's gnuplot-nox, pngcairo terminal): training and validation loss, learning rate,
// tokens/s and peak memory over steps, every run in the same chart so that runs compare.
#pragma once

#include <string>
#include <vector>

namespace shardtune::launcher {

struct PlotOptions {
  std::vector<std::string> runs;  // output directories holding metrics.jsonl
  std::string out_dir;            // default: <run>/plots for one run; required for several
  int width = 1280, height = 800;
};

// Writes loss.png, lr.png, throughput.png and memory.png into the output directory; returns
// their paths. Throws common::Error naming the run or file when a run has no training records,
// and when gnuplot is missing or fails.
std::vector<std::string> plot_runs(const PlotOptions& options);

}  // namespace shardtune::launcher
