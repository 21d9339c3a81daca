// metrics.jsonl as a run writes it.
#include "runtime/train/metrics_log.h"

#include <spdlog/spdlog.h>

#include <cerrno>
#include <cstring>

#include "runtime/train/metrics_file.h"

namespace shardtune::train {

MetricsLog::MetricsLog(bool enabled, bool recipes, const std::string& output_dir, int64_t step,
                       bool validation_pending)
    : path_(output_dir + "/metrics.jsonl"), recipes_path_(output_dir + "/metrics_data.json"), recipes_(recipes) {
  if (!enabled) return;
  try {
    trim_metrics(path_, step, validation_pending);
  } catch (const std::exception& e) {
    give_up("trimming it to the resumed step", e.what());
    return;
  }
  out_.open(path_, std::ios::app);
  if (!out_.good()) give_up("opening it", std::strerror(errno));
}

void MetricsLog::write(const std::string& line) {
  if (!out_.is_open()) return;
  out_ << line << std::flush;
  if (!out_.good()) give_up("writing a record", std::strerror(errno));
}

void MetricsLog::write_recipes() {
  if (!out_.is_open() || !recipes_) return;
  try {
    write_recipes_metrics(path_, recipes_path_);
  } catch (const std::exception& e) {
    recipes_ = false;
    spdlog::warn("metrics: cannot write {} ({}); training goes on without it", recipes_path_, e.what());
  }
}

void MetricsLog::close() {
  if (out_.is_open()) out_.close();
}

void MetricsLog::give_up(const std::string& what, const std::string& why) {
  spdlog::warn("metrics: {} failed while {} ({}); training goes on without metrics.jsonl", path_, what, why);
  if (out_.is_open()) out_.close();
  recipes_ = false;
}

}  // namespace shardtune::train
