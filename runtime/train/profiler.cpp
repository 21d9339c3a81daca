// The step profiler, through LibTorch's profiler (torch/csrc/autograd/profiler_kineto.h). The
// trace is written from the profiler's events by shardtune itself, so that a LibTorch built
// without Kineto (Debian's) produces the same file as one with it.
#include "runtime/train/profiler.h"

#include <ATen/record_function.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>
#include <torch/csrc/autograd/profiler_kineto.h>

#include <set>
#include <string_view>

#include "common/atomic_file.h"
#include "common/error.h"

namespace shardtune::train {
namespace {

namespace prof = torch::autograd::profiler;
namespace impl = torch::profiler::impl;

constexpr std::string_view kActiveMarker = "shardtune.profiler.active";

// LibTorch 2 reports nanoseconds, 1.13 microseconds.
template <class Event>
double start_us(const Event& e) {
  if constexpr (requires { e.startNs(); }) {
    return static_cast<double>(e.startNs()) / 1000.0;
  } else {
    return static_cast<double>(e.startUs());
  }
}

template <class Event>
double duration_us(const Event& e) {
  if constexpr (requires { e.durationNs(); }) {
    return static_cast<double>(e.durationNs()) / 1000.0;
  } else {
    return static_cast<double>(e.durationUs());
  }
}

bool is_matrix_product(std::string_view name) {
  return name == "aten::mm" || name == "aten::addmm" || name == "aten::bmm" || name == "aten::baddbmm";
}

}  // namespace

StepProfiler::StepProfiler(ProfilerOptions options, int rank) : options_(std::move(options)), rank_(rank) {
  if (options_.trace && rank_ == 0)
    spdlog::info("profiler: steps {}..{} of this run traced (after {} unprofiled and {} warm-up), into {}",
                 options_.wait + options_.warmup + 1, options_.wait + options_.warmup + options_.active, options_.wait,
                 options_.warmup, options_.dir);
}

StepProfiler::~StepProfiler() {
  if (!recording_) return;
  try {
    if (options_.trace) {
      spdlog::warn("profiler: the run ended inside the profiled steps; writing what was recorded");
      write_trace();
    } else {
      prof::disableProfiler();
    }
  } catch (const std::exception& e) {
    spdlog::warn("profiler: {}", e.what());
  }
}

void StepProfiler::start(bool with_flops) {
  ST_CHECK(!recording_, common::ErrorKind::kInternal, "the profiler is already recording");
  // FLOPs are computed from the operands' shapes.
  const impl::ProfilerConfig config(impl::ProfilerState::KINETO, /*report_input_shapes=*/with_flops,
                                    /*profile_memory=*/false, /*with_stack=*/false, with_flops);
  std::set<impl::ActivityType> activities{impl::ActivityType::CPU};
  if (options_.cuda) activities.insert(impl::ActivityType::CUDA);  // GPU kernels, through Kineto
  prof::prepareProfiler(config, activities);
  prof::enableProfiler(config, activities);
  recording_ = true;
}

void StepProfiler::begin_step(int64_t n) {
  try {
    if (options_.trace) {
      if (n == options_.wait + 1) start(false);
      if (n == options_.wait + options_.warmup + 1 && recording_) {
        RECORD_USER_SCOPE(std::string(kActiveMarker));  // events from here on are kept
      }
    }
    if (options_.flop_counter && n == options_.flop_step) start(true);
  } catch (const std::exception& e) {
    give_up(e.what());
  }
}

std::optional<double> StepProfiler::end_step(int64_t n) {
  try {
    if (options_.trace && recording_ && n == options_.wait + options_.warmup + options_.active) write_trace();
    if (!options_.flop_counter || n != options_.flop_step || !recording_) return std::nullopt;
    const std::unique_ptr<prof::ProfilerResult> result = prof::disableProfiler();
    recording_ = false;
    double flops = 0;
    for (const prof::KinetoEvent& e : result->events())
      if (is_matrix_product(e.name())) flops += static_cast<double>(e.flops());
    return flops;
  } catch (const std::exception& e) {
    give_up(e.what());
    return std::nullopt;
  }
}

void StepProfiler::give_up(const std::string& why) {
  spdlog::warn("profiler: {}; training goes on without profiling", why);
  options_.trace = false;
  options_.flop_counter = false;
  if (!recording_) return;
  recording_ = false;
  try {
    prof::disableProfiler();
  } catch (const std::exception&) {
  }
}

void StepProfiler::write_trace() {
  const std::unique_ptr<prof::ProfilerResult> result = prof::disableProfiler();
  recording_ = false;
  const auto& events = result->events();
  double active_from = 0;
  for (const prof::KinetoEvent& e : events)
    if (e.name() == kActiveMarker) active_from = start_us(e);
  nlohmann::json trace = {{"displayTimeUnit", "ms"}, {"traceEvents", nlohmann::json::array()}};
  nlohmann::json& out = trace["traceEvents"];
  out.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", rank_}, {"args", {{"name", fmt::format("rank {}", rank_)}}}});
  std::set<int64_t> device_threads;
  for (const prof::KinetoEvent& e : events) {
    const std::string name = e.name();
    if (name == kActiveMarker || start_us(e) < active_from) continue;
    const bool on_device = e.deviceType() != c10::DeviceType::CPU;
    const int64_t tid = on_device ? 1'000'000 + e.deviceIndex() : static_cast<int64_t>(e.startThreadId());
    if (on_device) device_threads.insert(tid);
    const char* category = on_device ? "kernel"
                           : e.scope() == static_cast<uint8_t>(at::RecordScope::USER_SCOPE) ? "user_annotation"
                                                                                           : "cpu_op";
    out.push_back({{"name", name}, {"cat", category}, {"ph", "X"}, {"ts", start_us(e)}, {"dur", duration_us(e)},
                   {"pid", rank_}, {"tid", tid}});
  }
  for (const int64_t tid : device_threads)
    out.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", rank_}, {"tid", tid},
                   {"args", {{"name", fmt::format("GPU {}", tid - 1'000'000)}}}});
  const std::string path = fmt::format("{}/rank-{:05d}.trace.json", options_.dir, rank_);
  common::AtomicFile file(path);
  file.write(trace.dump());
  file.commit();
  written_ = path;
  if (rank_ == 0) spdlog::info("profiler: {} events of {} step(s) written to {}", out.size(), options_.active, path);
}

}  // namespace shardtune::train
