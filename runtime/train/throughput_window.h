// Tokens and seconds of the steps since the last progress line, for its tokens/s, time per step
// and ETA; and the run's totals.
#pragma once

#include <cstdint>

namespace shardtune::train {

class ThroughputWindow {
 public:
  void add(double seconds, int64_t tokens) {
    seconds_ += seconds;
    tokens_ += tokens;
    ++steps_;
  }
  // Closes the window (after its progress line); its tokens count toward the run's total.
  void reset() {
    total_tokens_ += tokens_;
    seconds_ = 0;
    tokens_ = 0;
    steps_ = 0;
  }
  double seconds_per_step() const { return steps_ > 0 ? seconds_ / static_cast<double>(steps_) : 0.0; }
  // `ranks` ranks each trained about as many tokens as this one.
  double tokens_per_second(int ranks) const {
    return seconds_ > 0 ? static_cast<double>(tokens_ * ranks) / seconds_ : 0.0;
  }
  int64_t total_tokens() const { return total_tokens_ + tokens_; }

 private:
  double seconds_ = 0;
  int64_t tokens_ = 0, steps_ = 0, total_tokens_ = 0;
};

}  // namespace shardtune::train
