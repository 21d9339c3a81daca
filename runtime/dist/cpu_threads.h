// How many threads a rank computes with on the CPU, and applying that number to every pool that
// would otherwise size itself to the whole node: OpenMP, LibTorch's intra-op pool and OpenBLAS.
// Ranks that share a node each take their share of its CPUs, as torchrun's OMP_NUM_THREADS does.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace shardtune::dist {

struct ThreadInputs {
  int64_t threads_per_rank = 0;                // [launch] threads_per_rank; 0: chosen here
  std::optional<int64_t> omp_num_threads;      // OMP_NUM_THREADS, when the environment sets it
  std::optional<int64_t> slurm_cpus_per_task;  // inside a Slurm job: the CPUs Slurm gave each task
  int node_cores = 1;                          // physical cores of this rank's node
  int local_ranks = 1;                         // ranks on this node
  int affinity_cpus = 0;                       // CPUs this rank may run on; 0: unknown
};

struct ThreadChoice {
  int threads = 1;
  std::string reason;  // "2 cores / 2 ranks on this node", for the log
};

// In order: the job's threads_per_rank; OMP_NUM_THREADS; Slurm's cpus_per_task; the node's physical
// cores divided among its ranks (at least 1). The last two are capped at the CPUs the rank is bound to.
ThreadChoice choose_threads(const ThreadInputs& in);

// Physical cores of this machine (distinct core ids of online CPUs); the hardware threads when the
// topology cannot be read.
int physical_cores();

// The inputs of choose_threads as this process sees them (environment, topology, affinity).
ThreadInputs thread_inputs(int64_t threads_per_rank, int local_ranks);

// Sets OpenMP's, LibTorch's intra-op and OpenBLAS's thread counts of this process to `threads`.
void use_threads(int threads);

// OpenMP's thread count for the calling thread alone, 1: LibTorch's operations on a helper thread
// (a background checkpoint write) run serially instead of starting an OpenMP team of their own.
void use_one_thread_here();

// OpenBLAS's thread count; 0 when the BLAS is not OpenBLAS.
int blas_threads();

// The BLAS LibTorch's matrix products run on: "OpenBLAS 0.3.21 ... (Zen, 2 threads)" or the
// library's path.
std::string blas_description();

}  // namespace shardtune::dist
