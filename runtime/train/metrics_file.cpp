// metrics.jsonl trimming and the llama-recipes view of it.
#include "runtime/train/metrics_file.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <vector>

#include "common/atomic_file.h"
#include "common/error.h"

namespace shardtune::train {
namespace {

// Each whole line of the file with its record; lines that do not parse (a write cut short) are
// left out.
std::vector<std::pair<std::string, nlohmann::json>> read_records(const std::string& path) {
  std::ifstream in(path);
  ST_CHECK(in.good(), common::ErrorKind::kIo, "cannot read {}", path);
  std::vector<std::pair<std::string, nlohmann::json>> out;
  std::string line;
  while (std::getline(in, line)) {
    nlohmann::json record = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (record.is_object()) out.emplace_back(line, std::move(record));
  }
  return out;
}

double as_double(const nlohmann::json& v) { return v.is_number() ? v.get<double>() : std::nan(""); }

}  // namespace

void trim_metrics(const std::string& path, int64_t step, bool drop_eval_at_step) {
  if (!std::filesystem::is_regular_file(path)) return;  // none yet (or a device: not ours to rewrite)
  std::string kept;
  for (const auto& [line, record] : read_records(path)) {
    const bool eval = !record.contains("step");
    const char* key = eval ? "after_step" : "step";
    const int64_t last = eval && drop_eval_at_step ? step - 1 : step;
    if (record.contains(key) && record[key].is_number_integer() && record[key].get<int64_t>() <= last)
      kept += line + "\n";
  }
  common::AtomicFile file(path);
  file.write(kept);
  file.commit();
}

void write_recipes_metrics(const std::string& jsonl, const std::string& out) {
  nlohmann::ordered_json m;
  for (const char* key : {"train_step_loss", "train_epoch_loss", "train_step_perplexity", "train_epoch_perplexity",
                          "val_step_loss", "val_epoch_loss", "val_step_perplexity", "val_epoch_perplexity"})
    m[key] = nlohmann::json::array();
  std::map<int64_t, std::pair<double, int64_t>> epochs;  // epoch -> (sum of step losses, steps)
  for (const auto& [line, r] : read_records(jsonl)) {
    if (r.contains("step") && r.contains("loss")) {
      const double loss = as_double(r["loss"]);
      m["train_step_loss"].push_back(loss);
      m["train_step_perplexity"].push_back(std::exp(loss));
      auto& [sum, n] = epochs[r.value("epoch", int64_t{0})];
      sum += loss;
      ++n;
    } else if (r.contains("val_loss")) {
      const double loss = as_double(r["val_loss"]);
      for (const char* kind : {"step", "epoch"}) {
        m[fmt::format("val_{}_loss", kind)].push_back(loss);
        m[fmt::format("val_{}_perplexity", kind)].push_back(std::exp(loss));
      }
    }
  }
  for (const auto& [epoch, sum_n] : epochs) {
    const double mean = sum_n.first / static_cast<double>(sum_n.second);
    m["train_epoch_loss"].push_back(mean);
    m["train_epoch_perplexity"].push_back(std::exp(mean));
  }
  common::AtomicFile file(out);
  file.write(m.dump(2) + "\n");
  file.commit();
}

}  // namespace shardtune::train
