// Communicator checks with locally computable answers, and a bandwidth figure.
#include "runtime/dist/preflight.h"

#include <ATen/ops/arange.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/full.h>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "runtime/dist/collective_check.h"

namespace shardtune::dist {
namespace {

int64_t sum_of(const std::vector<int>& v) {
  int64_t s = 0;
  for (int x : v) s += x;
  return s;
}

void check_bf16(Communicator& comm, ReduceOp op, const std::vector<float>& mine, const at::Device& device,
                PreflightReport& report, const std::function<std::string(const std::vector<float>&)>& judge) {
  at::Tensor host = at::empty({static_cast<int64_t>(mine.size())}, at::kFloat);
  std::copy(mine.begin(), mine.end(), host.data_ptr<float>());
  at::Tensor t = host.to(device, at::kBFloat16);
  comm.all_reduce(t, op);
  const at::Tensor back = t.to(at::kCPU, at::kFloat).contiguous();
  const std::vector<float> got(back.data_ptr<float>(), back.data_ptr<float>() + back.numel());
  const std::string wrong = judge(got);
  if (!wrong.empty()) {
    report.failures++;
    report.summary += fmt::format("{}: bf16 {}: {}; ", comm.name(), op == ReduceOp::kSum ? "sum" : "average", wrong);
  }
}

// Each member contributes its world rank; the sum, the gathered list and the reduce-scatter are
// known locally.
void check_group(Communicator& comm, int world_rank, const at::Device& device, PreflightReport& report) {
  const at::TensorOptions on = at::TensorOptions().device(device);
  const int64_t expected_sum = sum_of(comm.world_ranks());
  at::Tensor sum = at::full({3}, world_rank, on.dtype(at::kLong));
  comm.all_reduce(sum, ReduceOp::kSum);
  if (sum[0].item<int64_t>() != expected_sum) {
    report.failures++;
    report.summary += fmt::format("{}: all_reduce sum {} != {}; ", comm.name(), sum[0].item<int64_t>(), expected_sum);
  }
  at::Tensor mine = at::full({1}, world_rank, on.dtype(at::kLong));
  at::Tensor gathered = at::empty({comm.size()}, on.dtype(at::kLong));
  comm.all_gather(mine, gathered);
  const at::Tensor on_host = gathered.to(at::kCPU);  // one copy back, not one per slot
  const int64_t* slot = on_host.data_ptr<int64_t>();
  for (int i = 0; i < comm.size(); ++i) {
    if (slot[i] != comm.world_ranks()[i]) {
      report.failures++;
      report.summary += fmt::format("{}: all_gather slot {} holds {} != {}; ", comm.name(), i, slot[i],
                                    comm.world_ranks()[i]);
    }
  }
  // Reduce-scatter (the gradients' path): element i of every rank's input is its world rank + i,
  // so element j of rank g's output is the ranks' sum + size x (g x 2 + j).
  constexpr int64_t kSlot = 2;
  const at::Tensor input = at::arange(world_rank, world_rank + comm.size() * kSlot, on.dtype(at::kLong));
  at::Tensor scattered = at::empty({kSlot}, on.dtype(at::kLong));
  comm.reduce_scatter(input, scattered, ReduceOp::kSum);
  const at::Tensor scattered_host = scattered.to(at::kCPU);
  for (int64_t j = 0; j < kSlot; ++j) {
    const int64_t want = expected_sum + comm.size() * (comm.rank() * kSlot + j);
    const int64_t got = scattered_host.data_ptr<int64_t>()[j];
    if (got != want) {
      report.failures++;
      report.summary += fmt::format("{}: reduce_scatter element {} holds {} != {}; ", comm.name(), j, got, want);
    }
  }
  // The 16-bit reduction path, with patterns whose every partial sum bf16 holds exactly, so that
  // the answer does not depend on the order a ring or tree reduces in (runtime/dist/collective_check.h).
  check_bf16(comm, ReduceOp::kSum, bf16_sum_pattern(comm.size(), comm.rank()), device, report,
             [&](const std::vector<float>& got) { return check_bf16_sum(got, comm.size()); });
  check_bf16(comm, ReduceOp::kAvg, bf16_avg_pattern(comm.size(), comm.rank()), device, report,
             [&](const std::vector<float>& got) { return check_bf16_avg(got, comm.size()); });
}

}  // namespace

PreflightReport run_preflight(ProcessGroups& groups, const at::Device& device) {
  PreflightReport report;
  Communicator& world = *groups.world;
  const int world_rank = world.world_ranks()[world.rank()];
  check_group(world, world_rank, device, report);
  check_group(*groups.shard, world_rank, device, report);
  check_group(*groups.replicate, world_rank, device, report);
  if (!device.is_cpu()) {
    // Scalars of the loop (stop flags, agreed errors) stay on the host: check MPI as well.
    check_group(world, world_rank, at::kCPU, report);
  }

  // Bandwidth: fp32 all-reduce of 8 MiB, a few rounds after one warm-up.
  constexpr int64_t kElements = 2 << 20;
  constexpr int kRounds = 5;
  at::Tensor buf = at::arange(kElements, at::TensorOptions().dtype(at::kFloat).device(device));
  world.all_reduce(buf, ReduceOp::kSum);
  (void)buf.sum().item<float>();  // the host waits for the device before timing
  world.barrier();
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < kRounds; ++i) world.all_reduce(buf, ReduceOp::kAvg);
  (void)buf.sum().item<float>();
  world.barrier();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  report.allreduce_bytes = kElements * 4;
  report.allreduce_gbps = static_cast<double>(report.allreduce_bytes) * kRounds / seconds / 1e9;

  at::Tensor failures = at::full({1}, report.failures, at::kInt);
  world.all_reduce(failures, ReduceOp::kSum);
  report.failures = failures[0].item<int>();
  return report;
}

}  // namespace shardtune::dist
