// Non-finite steps.
#include "runtime/train/nonfinite_guard.h"

#include <spdlog/spdlog.h>

#include "common/error.h"

namespace shardtune::train {
namespace {

constexpr const char* kHint =
    "HINT: lower [train] lr, turn on [train] gradient_clipping, or check the data; the newest committed "
    "checkpoint holds the last finite weights";

}  // namespace

void NonFiniteGuard::after_step(int64_t step, const StepResult& r) {
  if (!r.nonfinite) {
    in_a_row_ = 0;
    return;
  }
  ++skipped_;
  ++in_a_row_;
  const std::string what = fmt::format("step {}: the loss is {} and the gradient norm {}", step, r.loss, r.grad_norm);
  if (policy_ == job::OnNonFinite::kStop)
    common::raise(common::ErrorKind::kDiverged,
                  fmt::format("{}; no update was made and nothing was saved ([train] on_nonfinite = \"stop\"). {}",
                              what, kHint));
  if (in_a_row_ >= max_in_a_row_)
    common::raise(common::ErrorKind::kDiverged,
                  fmt::format("{} non-finite steps in a row, the last at {} ([train] max_nonfinite_skips = {}). {}",
                              in_a_row_, what, max_in_a_row_, kHint));
  spdlog::warn("{}: the update was skipped ({} in a row, {} in this run; [train] on_nonfinite = \"skip_step\")", what,
               in_a_row_, skipped_);
}

void NonFiniteGuard::before_save(int64_t step, bool weights_finite) {
  if (weights_finite) return;
  common::raise(common::ErrorKind::kDiverged,
                fmt::format("after step {} the weights or optimizer moments are not all finite, so its checkpoint "
                            "was not written. {}",
                            step, kHint));
}

}  // namespace shardtune::train
