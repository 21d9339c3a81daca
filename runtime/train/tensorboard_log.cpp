// metrics.jsonl records as TensorBoard scalars.
#include "runtime/train/tensorboard_log.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>

#include "runtime/train/tfevents.h"

namespace shardtune::train {
namespace {

namespace fs = std::filesystem;

// Training figures of the run's speed and memory, rather than of its learning.
constexpr std::array<std::string_view, 11> kPerf{
    "flops",          "step_seconds",    "compute_seconds", "comm_wait_seconds",        "data_wait_seconds",
    "tokens_per_second", "mfu",          "counted_flops",   "peak_rss_bytes",           "gpu_peak_allocated_bytes",
    "gpu_peak_reserved_bytes"};

double wall_time() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

void add(std::vector<std::pair<std::string, float>>& out, std::string tag, const nlohmann::json& v) {
  if (v.is_null()) out.emplace_back(std::move(tag), std::numeric_limits<float>::quiet_NaN());
  else if (v.is_boolean()) out.emplace_back(std::move(tag), v.get<bool>() ? 1.0f : 0.0f);
  else if (v.is_number()) out.emplace_back(std::move(tag), static_cast<float>(v.get<double>()));
}

std::string without_val(const std::string& key) { return key.rfind("val_", 0) == 0 ? key.substr(4) : key; }

// The seconds part of the newest event file's name under `dir` (0: none).
int64_t newest_file_time(const fs::path& dir) {
  int64_t newest = 0;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    const std::string prefix = "events.out.tfevents.";
    if (name.rfind(prefix, 0) != 0) continue;
    try {
      newest = std::max<int64_t>(newest, std::stoll(name.substr(prefix.size())));
    } catch (const std::exception&) {
    }
  }
  return newest;
}

std::string host_name() {
  char host[256] = {};
  if (gethostname(host, sizeof(host) - 1) != 0) return "host";
  std::string out(host);
  std::replace(out.begin(), out.end(), '/', '_');
  return out.empty() ? "host" : out;
}

}  // namespace

std::pair<int64_t, std::vector<std::pair<std::string, float>>> tensorboard_scalars(const std::string& jsonl_line) {
  const nlohmann::json r = nlohmann::json::parse(jsonl_line, nullptr, /*allow_exceptions=*/false);
  std::vector<std::pair<std::string, float>> out;
  if (!r.is_object()) return {0, out};
  const bool eval = !r.contains("step");
  const char* step_key = eval ? "after_step" : "step";
  if (!r.contains(step_key) || !r[step_key].is_number_integer()) return {0, out};
  for (const auto& [key, value] : r.items()) {
    if (key == step_key || key == "samples" || key == "sample_ids") continue;
    if (eval) {
      if (key == "val_sources" && value.is_object()) {
        for (const auto& [source, figures] : value.items())
          for (const auto& [name, v] : figures.items()) add(out, fmt::format("val/{}/{}", source, without_val(name)), v);
      } else {
        add(out, key == "eval_epoch" ? "val/epoch" : "val/" + without_val(key), value);
      }
    } else if (key == "sources" && value.is_object()) {
      for (const auto& [source, v] : value.items()) add(out, "train/samples/" + source, v);
    } else {
      const bool perf = std::find(kPerf.begin(), kPerf.end(), key) != kPerf.end();
      add(out, (perf ? "perf/" : "train/") + key, value);
    }
  }
  return {r[step_key].get<int64_t>(), out};
}

TensorboardLog::TensorboardLog(bool enabled, const std::string& dir, int64_t step, const std::string& metrics_jsonl) {
  if (!enabled) return;
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) {
    path_ = dir;
    give_up(ec.message());
    return;
  }
  // Named after the newest file there, whatever the clock says: TensorBoard reads them in name order.
  const int64_t now = static_cast<int64_t>(wall_time());
  const int64_t stamp = std::max(now, newest_file_time(dir) + 1);
  path_ = fmt::format("{}/events.out.tfevents.{:010d}.{}.{}", dir, stamp, host_name(), getpid());
  out_.open(path_, std::ios::binary | std::ios::trunc);
  if (!out_.good()) {
    give_up(std::strerror(errno));
    return;
  }
  append(file_version_event(wall_time()));
  append(session_start_event(wall_time(), step));
  std::ifstream kept(metrics_jsonl);
  std::string line;
  while (out_.is_open() && std::getline(kept, line))
    if (tensorboard_scalars(line).first == step) write(line);
}

void TensorboardLog::write(const std::string& jsonl_line) {
  if (!out_.is_open()) return;
  const auto [step, scalars] = tensorboard_scalars(jsonl_line);
  if (!scalars.empty()) append(scalars_event(wall_time(), step, scalars));
}

void TensorboardLog::append(const std::string& event) {
  if (!out_.is_open()) return;
  out_ << tfrecord(event) << std::flush;
  if (!out_.good()) give_up(std::strerror(errno));
}

void TensorboardLog::give_up(const std::string& why) {
  spdlog::warn("metrics: cannot write the TensorBoard events {} ({}); training goes on without them", path_, why);
  if (out_.is_open()) out_.close();
}

}  // namespace shardtune::train
