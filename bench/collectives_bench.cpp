// The watched communicator against raw MPI, measured in the same run: blocking MPI (Open MPI's
// tuned collectives) and non-blocking MPI (libnbc, waited on at once), against the communicator
// (non-blocking collectives under the watchdog; reduce-scatter, and all-reduces of 64 Ki elements
// and more, around its own ring). Prints, per collective and size, the median time of each and the
// ratios communicator / blocking MPI and communicator / non-blocking MPI, then the memory a call
// adds on top of its buffers (the largest over ranks of the peak RSS above the RSS before it).
// Run: mpirun -np 4 --oversubscribe build/bin/collectives_bench   (or bench/collectives.sh)
#include <ATen/ops/ones.h>
#include <fmt/format.h>
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <vector>

#include "common/process_memory.h"
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

// The most memory one call adds above what the process held before it, over ranks.
double added_mib(const std::function<void()>& fn) {
  MPI_Barrier(MPI_COMM_WORLD);
  const int64_t before = common::resident_bytes();
  common::reset_peak_resident();
  fn();
  double mib = static_cast<double>(common::peak_resident_bytes() - before) / (1 << 20), most = 0;
  MPI_Allreduce(&mib, &most, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return most;
}

void wait(MPI_Request r) { MPI_Wait(&r, MPI_STATUS_IGNORE); }

}  // namespace

int main(int argc, char** argv) {
  dist::MpiRuntime mpi(&argc, &argv);
  MPI_Comm dup;
  MPI_Comm_dup(MPI_COMM_WORLD, &dup);
  dist::MpiCommunicator comm(dup, "world", 600.0);
  const int size = comm.size();
  if (comm.rank() == 0)
    fmt::print("world size {}; bytes per rank; median of 15 rounds (5 from 128 MiB); MPI = blocking MPI, MPI_I = "
               "non-blocking MPI, comm = the communicator; added MiB = peak RSS a call adds, most over ranks\n"
               "{:<15} {:>10} {:>10} {:>10} {:>10} {:>10} {:>11} {:>9} {:>9} {:>9}\n",
               size, "collective", "bytes", "MPI us", "MPI_I us", "comm us", "comm/MPI", "comm/MPI_I", "MPI MiB",
               "MPI_I MiB", "comm MiB");
  for (int64_t bytes : {int64_t(4) << 10, int64_t(256) << 10, int64_t(4) << 20, int64_t(32) << 20, int64_t(128) << 20}) {
    const int64_t n = bytes / 4;
    at::Tensor a = at::ones({n}, at::kFloat), b = at::ones({n}, at::kFloat);
    at::Tensor gathered = at::ones({n * size}, at::kFloat), big = at::ones({n * size}, at::kFloat);
    struct Case {
      const char* name;
      std::function<void()> blocking, nonblocking, ours;
    };
    const int count = static_cast<int>(n);
    MPI_Request r;
    std::vector<Case> cases = {
        {"all_reduce",
         [&] { MPI_Allreduce(MPI_IN_PLACE, a.data_ptr(), count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD); },
         [&] {
           MPI_Iallreduce(MPI_IN_PLACE, a.data_ptr(), count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &r);
           wait(r);
         },
         [&] { comm.all_reduce(b, dist::ReduceOp::kSum); }},
        {"all_gather",
         [&] { MPI_Allgather(a.data_ptr(), count, MPI_FLOAT, gathered.data_ptr(), count, MPI_FLOAT, MPI_COMM_WORLD); },
         [&] {
           MPI_Iallgather(a.data_ptr(), count, MPI_FLOAT, gathered.data_ptr(), count, MPI_FLOAT, MPI_COMM_WORLD, &r);
           wait(r);
         },
         [&] { comm.all_gather(b, gathered); }},
        {"reduce_scatter",
         [&] { MPI_Reduce_scatter_block(big.data_ptr(), a.data_ptr(), count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD); },
         [&] {
           MPI_Ireduce_scatter_block(big.data_ptr(), a.data_ptr(), count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &r);
           wait(r);
         },
         [&] { comm.reduce_scatter(big, b, dist::ReduceOp::kSum); }},
    };
    for (const Case& c : cases) {
      const int rounds = bytes >= (int64_t(128) << 20) ? 5 : bytes >= (int64_t(4) << 20) ? 15 : 101;
      const double blocking = time_median(c.blocking, rounds), nonblocking = time_median(c.nonblocking, rounds),
                   ours = time_median(c.ours, rounds);
      const double blocking_mib = added_mib(c.blocking), nonblocking_mib = added_mib(c.nonblocking),
                   ours_mib = added_mib(c.ours);
      if (comm.rank() == 0)
        fmt::print("{:<15} {:>10} {:>10.1f} {:>10.1f} {:>10.1f} {:>10.2f} {:>11.2f} {:>9.1f} {:>9.1f} {:>9.1f}\n",
                   c.name, bytes, blocking * 1e6, nonblocking * 1e6, ours * 1e6, ours / blocking, ours / nonblocking,
                   blocking_mib, nonblocking_mib, ours_mib);
    }
  }
  return 0;
}
