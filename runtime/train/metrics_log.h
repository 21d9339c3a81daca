// Rank 0's metrics.jsonl (and llama-recipes' metrics_data.json) during a run. Writing them never
// stops training: the first failure (a full disk, a removed folder) is logged once as a warning
// and that output is switched off for the rest of the run; training goes on.
#pragma once

#include <cstdint>
#include <fstream>
#include <string>

namespace shardtune::train {

class MetricsLog {
 public:
  // `enabled` false (other ranks, or [metrics] jsonl = false): every call does nothing. Otherwise
  // trims the file back to `step` (a resumed run continues after its checkpoint; with
  // `validation_pending` the evaluation after `step` is dropped too, as it runs again) and opens it.
  MetricsLog(bool enabled, bool recipes, const std::string& output_dir, int64_t step, bool validation_pending);

  bool enabled() const { return out_.is_open(); }
  void write(const std::string& line);
  // metrics_data.json from the records so far (with [metrics] save_metrics).
  void write_recipes();
  void close();

 private:
  void give_up(const std::string& what, const std::string& why);

  std::string path_, recipes_path_;
  bool recipes_ = false;
  std::ofstream out_;
};

}  // namespace shardtune::train
