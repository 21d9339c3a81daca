// Text as byte tensors on the host.
#include "runtime/dist/text_collectives.h"

#include <ATen/ops/empty.h>
#include <ATen/ops/full.h>
#include <ATen/ops/zeros.h>

#include <cstring>

namespace shardtune::dist {
namespace {

int64_t reduced(Communicator& comm, int64_t value, ReduceOp op) {
  at::Tensor t = at::full({1}, value, at::kLong);
  comm.all_reduce(t, op);
  return t.item<int64_t>();
}

}  // namespace

int64_t max_over(Communicator& comm, int64_t value) { return reduced(comm, value, ReduceOp::kMax); }
int64_t min_over(Communicator& comm, int64_t value) { return reduced(comm, value, ReduceOp::kMin); }

std::string broadcast_text(Communicator& comm, const std::string& text, int root) {
  at::Tensor n = at::full({1}, static_cast<int64_t>(comm.rank() == root ? text.size() : 0), at::kLong);
  comm.broadcast(n, root);
  at::Tensor bytes = at::empty({n.item<int64_t>()}, at::kByte);
  if (comm.rank() == root) std::memcpy(bytes.data_ptr(), text.data(), text.size());
  comm.broadcast(bytes, root);
  return std::string(static_cast<const char*>(bytes.data_ptr()), static_cast<size_t>(bytes.numel()));
}

std::vector<std::string> gather_text(Communicator& comm, const std::string& mine, int root) {
  const int64_t longest = max_over(comm, static_cast<int64_t>(mine.size()));
  // Each rank sends its length and its text padded to the longest.
  at::Tensor record = at::zeros({8 + longest}, at::kByte);
  const int64_t n = static_cast<int64_t>(mine.size());
  std::memcpy(record.data_ptr(), &n, 8);
  std::memcpy(static_cast<char*>(record.data_ptr()) + 8, mine.data(), mine.size());
  at::Tensor all = comm.rank() == root ? at::empty({comm.size() * (8 + longest)}, at::kByte) : at::Tensor();
  comm.gather(record, all, root);
  std::vector<std::string> out;
  if (comm.rank() != root) return out;
  const char* p = static_cast<const char*>(all.data_ptr());
  for (int r = 0; r < comm.size(); ++r, p += 8 + longest) {
    int64_t len = 0;
    std::memcpy(&len, p, 8);
    out.emplace_back(p + 8, static_cast<size_t>(len));
  }
  return out;
}

}  // namespace shardtune::dist
