// Element types and the size checks every communicator shares.
#include "runtime/dist/communicator.h"

#include <fmt/format.h>

#include "common/error.h"

namespace shardtune::dist {

std::string Communicator::failure() const {
  {
    std::lock_guard lock(failure_mutex_);
    if (!marked_.empty()) return marked_;
  }
  return backend_failure();
}

void Communicator::mark_failed(const std::string& why) {
  std::lock_guard lock(failure_mutex_);
  if (marked_.empty()) marked_ = why.empty() ? "marked failed" : why;
}

using common::ErrorKind;

common::Dtype dtype_of(const at::Tensor& t) {
  switch (t.scalar_type()) {
    case at::kFloat: return common::Dtype::kF32;
    case at::kDouble: return common::Dtype::kF64;
    case at::kBFloat16: return common::Dtype::kBF16;
    case at::kHalf: return common::Dtype::kF16;
    case at::kInt: return common::Dtype::kI32;
    case at::kLong: return common::Dtype::kI64;
    case at::kByte:
    case at::kBool: return common::Dtype::kU8;
    default:
      common::raise(ErrorKind::kInternal,
                    fmt::format("collectives do not carry {} tensors", c10::toString(t.scalar_type())));
  }
}

namespace {

void check_same_dtype(const Communicator& c, const at::Tensor& a, const at::Tensor& b, std::string_view op) {
  ST_CHECK(a.scalar_type() == b.scalar_type(), ErrorKind::kInternal, "{} on '{}': input is {} but output is {}", op,
           c.name(), c10::toString(a.scalar_type()), c10::toString(b.scalar_type()));
  ST_CHECK(a.device() == b.device(), ErrorKind::kInternal, "{} on '{}': input on {} but output on {}", op, c.name(),
           a.device().str(), b.device().str());
}

}  // namespace

void check_all_gather_sizes(const Communicator& c, const at::Tensor& input, const at::Tensor& output) {
  check_same_dtype(c, input, output, "all_gather");
  ST_CHECK(output.numel() == input.numel() * c.size(), ErrorKind::kInternal,
           "all_gather on '{}': output has {} elements, expected {} ranks x {}", c.name(), output.numel(), c.size(),
           input.numel());
}

void check_reduce_scatter_sizes(const Communicator& c, const at::Tensor& input, const at::Tensor& output) {
  check_same_dtype(c, input, output, "reduce_scatter");
  ST_CHECK(input.numel() == output.numel() * c.size(), ErrorKind::kInternal,
           "reduce_scatter on '{}': input has {} elements, expected {} ranks x {}", c.name(), input.numel(), c.size(),
           output.numel());
}

void check_root(const Communicator& c, int root, std::string_view op) {
  ST_CHECK(root >= 0 && root < c.size(), ErrorKind::kInternal, "{} on '{}': root {} outside 0..{}", op, c.name(), root,
           c.size() - 1);
}

void check_gather_sizes(const Communicator& c, const at::Tensor& input, const at::Tensor& output, int root) {
  check_root(c, root, "gather");
  if (c.rank() != root) return;
  check_same_dtype(c, input, output, "gather");
  ST_CHECK(output.numel() == input.numel() * c.size(), ErrorKind::kInternal,
           "gather on '{}': output has {} elements, expected {} ranks x {}", c.name(), output.numel(), c.size(),
           input.numel());
}

}  // namespace shardtune::dist
