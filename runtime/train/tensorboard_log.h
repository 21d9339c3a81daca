// Rank 0's TensorBoard event files ([metrics] tensorboard): every record of metrics.jsonl as
// scalars, tagged as docs/metrics.md lists (train/..., perf/..., val/...), at the record's step
// (a validation's: the steps taken before it). Each run writes a file of its own under
// <output_dir>/tensorboard/, named to sort after the earlier ones; it opens with a session START
// at the step it resumes from, so TensorBoard drops what earlier files hold from that step on, and
// then repeats the kept records of that step. Writing never stops training: the first failure is
// logged once as a warning and the files are left as they are.
#pragma once

#include <cstdint>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

namespace shardtune::train {

// The scalars of one metrics.jsonl record and the step they belong to; an empty list for a line
// that is not a record. A null (a loss that was not finite) is NaN.
std::pair<int64_t, std::vector<std::pair<std::string, float>>> tensorboard_scalars(const std::string& jsonl_line);

class TensorboardLog {
 public:
  // `enabled` false: every call does nothing. `metrics_jsonl`: the run's metrics.jsonl, already
  // trimmed to `step`, whose records at `step` the new file repeats.
  TensorboardLog(bool enabled, const std::string& dir, int64_t step, const std::string& metrics_jsonl);
  void write(const std::string& jsonl_line);
  bool enabled() const { return out_.is_open(); }
  const std::string& path() const { return path_; }

 private:
  void append(const std::string& event);
  void give_up(const std::string& why);

  std::string path_;
  std::ofstream out_;
};

}  // namespace shardtune::train
