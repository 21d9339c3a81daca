// Threads per rank on the CPU.
#include "runtime/dist/cpu_threads.h"

#include <ATen/Parallel.h>
#include <dlfcn.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <thread>
#include <utility>

#include "common/cpu_affinity.h"

namespace shardtune::dist {
namespace {

std::optional<int64_t> positive_env(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return std::nullopt;
  char* end = nullptr;
  const long long n = std::strtoll(v, &end, 10);
  // OMP_NUM_THREADS may be a list ("4,2": per nesting level); its first element counts here.
  if (end == v || n <= 0 || (*end != '\0' && *end != ',')) return std::nullopt;
  return n;
}

int cap(int threads, int affinity_cpus) { return affinity_cpus > 0 ? std::min(threads, affinity_cpus) : threads; }

}  // namespace

ThreadChoice choose_threads(const ThreadInputs& in) {
  if (in.threads_per_rank > 0)
    return {static_cast<int>(in.threads_per_rank), "[launch] threads_per_rank"};
  if (in.omp_num_threads)
    return {static_cast<int>(*in.omp_num_threads), "OMP_NUM_THREADS"};
  const std::string bound =
      in.affinity_cpus > 0 ? fmt::format(", bound to {} CPU(s)", in.affinity_cpus) : std::string();
  if (in.slurm_cpus_per_task) {
    const int t = cap(static_cast<int>(*in.slurm_cpus_per_task), in.affinity_cpus);
    return {t, fmt::format("Slurm's cpus_per_task = {}{}", *in.slurm_cpus_per_task, bound)};
  }
  const int ranks = std::max(1, in.local_ranks);
  const int t = cap(std::max(1, in.node_cores / ranks), in.affinity_cpus);
  return {t, fmt::format("{} core(s) / {} rank(s) on this node{}", in.node_cores, ranks, bound)};
}

int physical_cores() {
  namespace fs = std::filesystem;
  std::set<std::pair<std::string, std::string>> cores;
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator("/sys/devices/system/cpu", ec)) {
    const std::string name = e.path().filename().string();
    if (name.size() < 4 || name.compare(0, 3, "cpu") != 0 ||
        name.find_first_not_of("0123456789", 3) != std::string::npos)
      continue;
    std::ifstream online(e.path() / "online");
    std::string on;
    if (online && std::getline(online, on) && on == "0") continue;
    std::ifstream package(e.path() / "topology" / "physical_package_id"), core(e.path() / "topology" / "core_id");
    std::string p, c;
    if (!package || !core || !std::getline(package, p) || !std::getline(core, c)) continue;
    cores.emplace(p, c);
  }
  if (!cores.empty()) return static_cast<int>(cores.size());
  return std::max(1u, std::thread::hardware_concurrency());
}

ThreadInputs thread_inputs(int64_t threads_per_rank, int local_ranks) {
  ThreadInputs in;
  in.threads_per_rank = threads_per_rank;
  in.omp_num_threads = positive_env("OMP_NUM_THREADS");
  if (std::getenv("SLURM_JOB_ID") != nullptr) in.slurm_cpus_per_task = positive_env("SLURM_CPUS_PER_TASK");
  in.node_cores = physical_cores();
  in.local_ranks = local_ranks;
  in.affinity_cpus = static_cast<int>(common::cpu_affinity().cpus.size());
  return in;
}

void use_threads(int threads) {
  // at::set_num_threads sets OpenMP's count (omp_set_num_threads) and LibTorch's own pool; the
  // OpenMP build of OpenBLAS follows OpenMP's count, its pthreads build needs its own call.
  at::set_num_threads(threads);
  using SetThreads = void (*)(int);
  if (auto set = reinterpret_cast<SetThreads>(::dlsym(RTLD_DEFAULT, "openblas_set_num_threads"))) set(threads);
}

void use_one_thread_here() {
  // omp_set_num_threads changes the calling thread's count only; at::set_num_threads is process-wide.
  using SetThreads = void (*)(int);
  if (auto set = reinterpret_cast<SetThreads>(::dlsym(RTLD_DEFAULT, "omp_set_num_threads"))) set(1);
}

int blas_threads() {
  using GetThreads = int (*)();
  auto threads = reinterpret_cast<GetThreads>(::dlsym(RTLD_DEFAULT, "openblas_get_num_threads"));
  return threads ? threads() : 0;
}

std::string blas_description() {
  using GetConfig = char* (*)();
  if (auto config = reinterpret_cast<GetConfig>(::dlsym(RTLD_DEFAULT, "openblas_get_config")))
    return fmt::format("OpenBLAS ({}, {} thread(s))", config(), blas_threads());
  void* sgemm = ::dlsym(RTLD_DEFAULT, "sgemm_");
  Dl_info info{};
  if (sgemm != nullptr && ::dladdr(sgemm, &info) != 0 && info.dli_fname != nullptr) {
    std::error_code ec;
    const std::filesystem::path real = std::filesystem::canonical(info.dli_fname, ec);
    return ec ? std::string(info.dli_fname) : real.string();
  }
  return "no BLAS found (sgemm_ is not loaded)";
}

}  // namespace shardtune::dist
