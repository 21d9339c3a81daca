// Communicator checks with locally computable answers, and a bandwidth figure.
#include "rank/preflight.h"

#include <ATen/ops/arange.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/full.h>
#include <fmt/format.h>

#include <chrono>

namespace shardtune::rank_program {
namespace {

using dist::ReduceOp;

int64_t sum_of(const std::vector<int>& v) {
  int64_t s = 0;
  for (int x : v) s += x;
  return s;
}

// Each member contributes its world rank; the sum and the gathered list are known locally.
void check_group(dist::Communicator& comm, int world_rank, const at::Device& device, PreflightReport& report) {
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
  for (int i = 0; i < comm.size(); ++i) {
    if (gathered[i].item<int64_t>() != comm.world_ranks()[i]) {
      report.failures++;
      report.summary += fmt::format("{}: all_gather slot {} holds {} != {}; ", comm.name(), i,
                                    gathered[i].item<int64_t>(), comm.world_ranks()[i]);
    }
  }
  // bf16 average of small integers is exact: checks the 16-bit reduction path.
  at::Tensor avg = at::full({5}, static_cast<float>(comm.rank()), on.dtype(at::kBFloat16));
  comm.all_reduce(avg, ReduceOp::kAvg);
  const float expected_avg = static_cast<float>(comm.size() - 1) / 2.0f;
  if (avg[4].item<float>() != expected_avg) {
    report.failures++;
    report.summary += fmt::format("{}: bf16 avg {} != {}; ", comm.name(), avg[4].item<float>(), expected_avg);
  }
}

}  // namespace

PreflightReport run_preflight(dist::ProcessGroups& groups, const at::Device& device) {
  PreflightReport report;
  dist::Communicator& world = *groups.world;
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

}  // namespace shardtune::rank_program
