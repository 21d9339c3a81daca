// Checkpoint save and load bandwidth at the world size it runs with, for sharded and full
// checkpoints, each as a ratio to the disk's raw sequential bandwidth measured in the same run on
// the same filesystem (write: dd-style 16 MiB writes then fsync; read: cold sequential reads).
// Run: bench/ckpt.sh, or mpirun -np 4 build/bin/ckpt_bench WORK_DIR [LAYERS]
#include <fcntl.h>
#include <fmt/format.h>
#include <mpi.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <vector>

#include "checkpoint/sharded_checkpoint.h"
#include "runtime/dist/mpi_runtime.h"

using namespace shardtune;
namespace fs = std::filesystem;

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

uint64_t dir_bytes(const std::string& dir) {
  uint64_t n = 0;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.is_regular_file()) n += e.file_size();
  return n;
}

void drop_from_cache(const std::string& dir) {
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (!e.is_regular_file()) continue;
    const int fd = ::open(e.path().c_str(), O_RDONLY);
    if (fd < 0) continue;
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    ::close(fd);
  }
}

// Raw write: `bytes` in 16 MiB writes and an fsync, as dd conv=fsync; then a cold read of it.
std::pair<double, double> raw_bandwidth(const std::string& path, uint64_t bytes) {
  std::vector<char> block(16 << 20, 1);
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  auto start = Clock::now();
  for (uint64_t done = 0; done < bytes; done += block.size())
    if (::write(fd, block.data(), block.size()) < 0) break;
  ::fsync(fd);
  ::close(fd);
  const double write_bw = static_cast<double>(bytes) / seconds_since(start);
  drop_from_cache(fs::path(path).parent_path().string());
  const int rfd = ::open(path.c_str(), O_RDONLY);
  start = Clock::now();
  uint64_t read = 0;
  for (ssize_t n; (n = ::read(rfd, block.data(), block.size())) > 0;) read += static_cast<uint64_t>(n);
  ::close(rfd);
  const double read_bw = static_cast<double>(read) / seconds_since(start);
  fs::remove(path);
  return {write_bw, read_bw};
}

}  // namespace

int main(int argc, char** argv) {
  dist::MpiRuntime mpi(&argc, &argv);
  if (argc < 2) {
    fmt::print(stderr, "usage: ckpt_bench WORK_DIR [LAYERS]\n");
    return 2;
  }
  const std::string work = argv[1];
  int rank = 0, world = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  model::LlamaConfig cfg;
  cfg.hidden_size = 2048;
  cfg.intermediate_size = 8192;
  cfg.num_attention_heads = 32;
  cfg.num_key_value_heads = 8;
  cfg.head_dim = 64;
  cfg.num_hidden_layers = argc > 2 ? std::stoi(argv[2]) : 12;
  job::Job job;
  job.slurm.ntasks_per_node = world;
  const fsdp::FsdpOptions options = fsdp::fsdp_options_from_job(job, world);
  dist::ProcessGroups groups = dist::make_mpi_groups(MPI_COMM_WORLD, options.shard_size, 3600.0);
  model::LlamaForCausalLM skeleton(cfg, at::TensorOptions().device(at::kMeta));
  fsdp::FsdpLlama model(skeleton, groups, options);
  for (fsdp::FlatParam* f : model.flat_params()) f->shard().uniform_(-1, 1);
  // The first large write of a process pays for evicting the page cache (seen: 5x slower): a
  // throwaway write of one checkpoint's size comes first, then the raw disk is measured before and
  // after the checkpoints and averaged.
  uint64_t approx_bytes = 0;
  for (fsdp::FlatParam* f : model.flat_params()) approx_bytes += static_cast<uint64_t>(f->layout().numel()) * 4;
  std::pair<double, double> raw_before{0, 0};
  if (rank == 0) {
    fs::create_directories(work);
    raw_bandwidth(work + "/warmup.bin", approx_bytes);
    ::sync();
    raw_before = raw_bandwidth(work + "/raw.bin", approx_bytes);
  }
  MPI_Barrier(MPI_COMM_WORLD);

  struct Result {
    std::string what;
    double seconds;
    uint64_t bytes;
  };
  std::vector<Result> results;
  for (bool full : {false, true}) {
    const std::string root = work + (full ? "/full" : "/sharded");
    // Earlier dirty pages (of this run or another) must not be flushed on this save's time.
    if (rank == 0) ::sync();
    MPI_Barrier(MPI_COMM_WORLD);
    auto start = Clock::now();
    checkpoint::TrainingState state;
    state.step = 1;
    const std::string dir = checkpoint::save_checkpoint(model, nullptr, state, groups, root, 1, full);
    MPI_Barrier(MPI_COMM_WORLD);
    const double save = seconds_since(start);
    const uint64_t bytes = dir_bytes(dir);
    if (rank == 0) drop_from_cache(dir);
    MPI_Barrier(MPI_COMM_WORLD);
    start = Clock::now();
    checkpoint::load_sharded_checkpoint(model, nullptr, dir, MPI_COMM_WORLD);
    MPI_Barrier(MPI_COMM_WORLD);
    const double load = seconds_since(start);
    results.push_back({full ? "full save" : "sharded save", save, bytes});
    results.push_back({full ? "full load" : "sharded load", load, bytes});
    if (rank == 0) fs::remove_all(root);
  }
  if (rank == 0) {
    const uint64_t bytes = results.front().bytes;
    ::sync();
    const auto raw_after = raw_bandwidth(work + "/raw.bin", bytes);
    const double write_bw = (raw_before.first + raw_after.first) / 2, read_bw = (raw_before.second + raw_after.second) / 2;
    fmt::print("world size {}: {:.2f}B parameters, {:.2f} GB per checkpoint (fp32, no optimizer state)\n", world,
               static_cast<double>(cfg.num_parameters()) / 1e9, static_cast<double>(bytes) / 1e9);
    fmt::print("raw disk (mean of before and after): write {:.2f} GB/s (16 MiB writes + fsync), cold read {:.2f} GB/s\n",
               write_bw / 1e9, read_bw / 1e9);
    for (const Result& r : results) {
      const double bw = static_cast<double>(r.bytes) / r.seconds;
      const bool save = r.what.find("save") != std::string::npos;
      fmt::print("  {:<13} {:6.2f} s  {:5.2f} GB/s  ratio to raw {} {:.2f} (target >= 0.8)\n", r.what, r.seconds, bw / 1e9,
                 save ? "write" : "read", bw / (save ? write_bw : read_bw));
    }
  }
  return 0;
}
