// Batches made ahead of training: while a step runs, up to `depth` later steps' micro-batches
// are collated on their own threads, so data loading stays off the step's path and memory holds
// at most `depth` steps of batches. depth 0: made on demand, on the training thread.
#pragma once

#include <algorithm>
#include <deque>
#include <functional>
#include <future>
#include <vector>

#include "runtime/train/batch.h"

namespace shardtune::train {

class Prefetcher {
 public:
  using Make = std::function<std::vector<Batch>(int64_t cursor)>;
  Prefetcher(Make make, int depth) : make_(std::move(make)), depth_(depth) {}

  // The batches of the step at `cursor`; `upcoming` are the cursors of the steps after it, in
  // order (only the first `depth` are started now).
  std::vector<Batch> take(int64_t cursor, const std::vector<int64_t>& upcoming) {
    if (depth_ <= 0) return make_(cursor);
    if (pending_.empty() || pending_.front().first != cursor) {
      pending_.clear();  // a new epoch, or a resume: start over
      pending_.emplace_back(cursor, std::async(std::launch::async, make_, cursor));
    }
    for (const int64_t next : upcoming) {
      if (static_cast<int>(pending_.size()) > depth_) break;
      if (next <= pending_.back().first) continue;
      pending_.emplace_back(next, std::async(std::launch::async, make_, next));
    }
    most_ahead_ = std::max(most_ahead_, static_cast<int>(pending_.size()) - 1);
    std::vector<Batch> out = pending_.front().second.get();
    pending_.pop_front();
    return out;
  }

  // The most steps whose batches were being collated ahead of the one taken, at any take.
  int most_ahead() const { return most_ahead_; }

 private:
  Make make_;
  int depth_;
  std::deque<std::pair<int64_t, std::future<std::vector<Batch>>>> pending_;
  int most_ahead_ = 0;
};

}  // namespace shardtune::train
