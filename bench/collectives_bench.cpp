// Cost of the watched communicator against raw blocking MPI, measured in the same run: the
// communicator waits on non-blocking collectives with a timeout (the watchdog); this shows what
// that costs. Prints, per collective and size, both times and the ratio communicator ÷ MPI.
// Run: mpirun -np 4 --oversubscribe build/bin/collectives_bench   (or bench/collectives.sh)
#include <ATen/ops/ones.h>
#include <fmt/format.h>
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <vector>

#include "runtime/dist/mpi_communicator.h"
#include "runtime/dist/mpi_runtime.h"

using namespace shardtune;

namespace {

// Median seconds per call over `rounds`, after one warm-up; ranks start together.
double time_median(const std::function<void()>& fn, int rounds) {
  fn();
  std::vector<double> t;
  for (int i = 0; i < rounds; ++i) {
    MPI_Barrier(MPI_COMM_WORLD);
    const auto start = std::chrono::steady_clock::now();
    fn();
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    double slowest = 0;
    MPI_Allreduce(&s, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    t.push_back(slowest);
  }
  std::nth_element(t.begin(), t.begin() + t.size() / 2, t.end());
  return t[t.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  dist::MpiRuntime mpi(&argc, &argv);
  MPI_Comm dup;
  MPI_Comm_dup(MPI_COMM_WORLD, &dup);
  dist::MpiCommunicator comm(dup, "world", 600.0);
  const int size = comm.size();
  if (comm.rank() == 0)
    fmt::print("world size {}; median of 15 rounds; ratio = communicator / raw MPI (1.00 = no overhead)\n"
               "{:<15} {:>10} {:>12} {:>12} {:>7}\n",
               size, "collective", "bytes", "raw MPI us", "comm us", "ratio");
  for (int64_t bytes : {int64_t(4) << 10, int64_t(256) << 10, int64_t(4) << 20, int64_t(32) << 20}) {
    const int64_t n = bytes / 4;
    at::Tensor a = at::ones({n}, at::kFloat), b = at::ones({n}, at::kFloat);
    at::Tensor gathered = at::ones({n * size}, at::kFloat), big = at::ones({n * size}, at::kFloat);
    struct Case {
      const char* name;
      std::function<void()> raw, ours;
    };
    const int count = static_cast<int>(n);
    std::vector<Case> cases = {
        {"all_reduce",
         [&] { MPI_Allreduce(MPI_IN_PLACE, a.data_ptr(), count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD); },
         [&] { comm.all_reduce(b, dist::ReduceOp::kSum); }},
        {"all_gather",
         [&] { MPI_Allgather(a.data_ptr(), count, MPI_FLOAT, gathered.data_ptr(), count, MPI_FLOAT, MPI_COMM_WORLD); },
         [&] { comm.all_gather(b, gathered); }},
        {"reduce_scatter",
         [&] { MPI_Reduce_scatter_block(big.data_ptr(), a.data_ptr(), count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD); },
         [&] { comm.reduce_scatter(big, b, dist::ReduceOp::kSum); }},
    };
    for (const Case& c : cases) {
      const int rounds = bytes >= (int64_t(4) << 20) ? 15 : 101;
      const double raw = time_median(c.raw, rounds);
      const double ours = time_median(c.ours, rounds);
      if (comm.rank() == 0)
        fmt::print("{:<15} {:>10} {:>12.1f} {:>12.1f} {:>7.2f}\n", c.name, bytes, raw * 1e6, ours * 1e6, ours / raw);
    }
  }
  return 0;
}
