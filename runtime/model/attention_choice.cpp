#include "runtime/model/attention_choice.h"

#include <spdlog/spdlog.h>

#include <exception>

namespace shardtune::model {

bool AttentionChoice::use_cudnn(const std::string& shape, const std::function<Timing()>& measure) {
  // Held while measuring: a second thread meeting the same shape waits for its choice.
  std::lock_guard<std::mutex> lock(mutex_);
  if (auto found = choices_.find(shape); found != choices_.end()) return found->second;
  if (choices_.size() >= kMaxShapes) {
    if (!told_full_)
      spdlog::info("attention: {} shapes timed; {} and every shape after it leave cuDNN out", kMaxShapes, shape);
    told_full_ = true;
    return false;
  }
  Timing t;
  try {
    t = measure();
  } catch (const std::exception& e) {  // out of memory for the copies, say: training goes on without
    spdlog::warn("attention {}: could not time it ({}); cuDNN left out", shape, e.what());
    choices_.emplace(shape, false);
    return false;
  }
  const bool cudnn = t.with_cudnn < t.without_cudnn;
  choices_.emplace(shape, cudnn);
  spdlog::info("attention {}: {:.3f} ms a forward and backward with cuDNN allowed, {:.3f} ms without: {}", shape,
               1e3 * t.with_cudnn, 1e3 * t.without_cudnn, cudnn ? "cuDNN allowed" : "cuDNN left out");
  return cudnn;
}

std::map<std::string, bool> AttentionChoice::choices() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return choices_;
}

AttentionChoice& attention_choice() {
  static AttentionChoice choice;
  return choice;
}

}  // namespace shardtune::model
