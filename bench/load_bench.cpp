// Streaming load of a Hugging Face folder into FSDP shards at the world size it is run with:
// each rank's peak memory against its bound, the same against the naive way (one process holding
// the whole model), and load throughput against the disk's plain sequential read, all measured in
// this run on the same files (cold: the files are dropped from the page cache before each read).
// Run: bench/load.sh, or mpirun -np 4 build/bin/load_bench [--reps N] MODEL_DIR (N loads, 5 by
// default, each between two plain reads; the median ratio counts), and for the naive figure,
// in a process of its own: build/bin/load_bench --naive MODEL_DIR. With --digest: what the base
// model's identity (every byte digested by world rank 0 as it reads) adds to a load (bench/digest.sh).
#include <fcntl.h>
#include <fmt/format.h>
#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <optional>
#include <vector>

#include "checkpoint/hf/hf_tensor_source.h"
#include "checkpoint/hf/weights_digest.h"
#include "common/process_memory.h"
#include "checkpoint/hf/safetensors_torch.h"
#include "runtime/dist/mpi_runtime.h"
#include "runtime/fsdp/shard_loader.h"

using namespace shardtune;
namespace fs = std::filesystem;

namespace {

using Clock = std::chrono::steady_clock;

std::vector<fs::path> weight_files(const std::string& dir) {
  std::vector<fs::path> out;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().extension() == ".safetensors") out.push_back(e.path());
  return out;
}

// Asks the kernel to forget the files' cached pages, so the next read comes from the disk.
void drop_from_cache(const std::string& dir) {
  for (const fs::path& p : weight_files(dir)) {
    const int fd = ::open(p.c_str(), O_RDONLY);
    if (fd < 0) continue;
    ::fdatasync(fd);
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    ::close(fd);
  }
}

// Plain sequential read of every file: the disk's bandwidth for this data, in bytes per second.
// `buffer` is allocated (and touched) before peaks are measured.
double raw_read_bandwidth(const std::string& dir, std::vector<char>& buffer) {
  uint64_t bytes = 0;
  const auto start = Clock::now();
  for (const fs::path& p : weight_files(dir)) {
    const int fd = ::open(p.c_str(), O_RDONLY);
    for (ssize_t n; (n = ::read(fd, buffer.data(), buffer.size())) > 0;) bytes += static_cast<uint64_t>(n);
    ::close(fd);
  }
  return static_cast<double>(bytes) / std::chrono::duration<double>(Clock::now() - start).count();
}

// The naive way: this process reads the whole model into memory. Returns its peak growth.
int64_t naive_peak_growth(const std::string& dir) {
  common::reset_peak_resident();
  const int64_t before = common::resident_bytes();
  const checkpoint::HfFolder folder = checkpoint::HfFolder::open(dir);
  std::vector<at::Tensor> all;
  for (const std::string& name : folder.tensor_names()) all.push_back(checkpoint::read_tensor(folder.file_of(name), name));
  return common::peak_resident_bytes() - before;
}

}  // namespace

// What the base model's identity costs (checkpoint/hf/weights_digest.h): cold loads alternate
// without and with world rank 0 digesting every byte it reads, as a LoRA job's rank 0 does.
int digest_cost(fsdp::FsdpLlama& sharded, const std::string& dir, int reps, int rank) {
  std::vector<double> ratios, shares;
  for (int rep = 0; rep < reps; ++rep) {
    double seconds[2] = {0, 0};
    double hashing = 0;
    for (int with = 0; with < 2; ++with) {
      if (rank == 0) drop_from_cache(dir);
      MPI_Barrier(MPI_COMM_WORLD);
      std::optional<checkpoint::WeightsDigest> digest;
      if (with && rank == 0) digest.emplace(checkpoint::HfFolder::open(dir));
      const fsdp::SourceFactory source = [&]() -> std::unique_ptr<fsdp::TensorSource> {
        auto s = checkpoint::HfFolderSourceFactory{dir}();
        return digest ? checkpoint::digesting_source(std::move(s), *digest) : std::move(s);
      };
      seconds[with] = fsdp::load_shards(sharded, source).seconds;
      if (digest) {
        digest->hex();
        hashing = digest->seconds();
      }
    }
    if (rank != 0) continue;
    ratios.push_back(seconds[1] / seconds[0]);
    shares.push_back(hashing / seconds[1]);
    fmt::print("load {}: {:.2f} s without the digest, {:.2f} s with it ({:.2f} s hashing): {:.3f}\n", rep + 1,
               seconds[0], seconds[1], hashing, ratios.back());
  }
  if (rank == 0) {
    std::sort(ratios.begin(), ratios.end());
    std::sort(shares.begin(), shares.end());
    fmt::print("load with the base digest / without, median of {}: {:.3f}; hashing / load time: {:.3f}\n", reps,
               ratios[ratios.size() / 2], shares[shares.size() / 2]);
  }
  return 0;
}

int main(int argc, char** argv) {
  dist::MpiRuntime mpi(&argc, &argv);
  if (argc < 2) {
    fmt::print(stderr, "usage: load_bench [--reps N] [--digest | --naive] MODEL_DIR\n");
    return 2;
  }
  int reps = 5;
  if (argc > 3 && std::string(argv[1]) == "--reps") {
    reps = std::max(1, std::stoi(argv[2]));
    argv += 2;
    argc -= 2;
  }
  bool digest_only = false;
  if (std::string(argv[1]) == "--digest" && argc > 2) {
    digest_only = true;
    ++argv;
    --argc;
  }
  if (std::string(argv[1]) == "--naive" && argc > 2) {
    // One process holding the whole model, as when every rank loads it: its peak per model byte.
    const std::string dir = argv[2];
    uint64_t bytes = 0;
    for (const fs::path& p : weight_files(dir)) bytes += fs::file_size(p);
    fmt::print("naive (one process reads the whole model): peak / model bytes {:.3f}\n",
               static_cast<double>(naive_peak_growth(dir)) / static_cast<double>(bytes));
    return 0;
  }
  const std::string dir = argv[1];
  int rank = 0, world = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  const checkpoint::HfFolder folder = checkpoint::HfFolder::open(dir);
  const model::LlamaConfig config = model::LlamaConfig::from_json(folder.config(), dir + "/config.json");
  uint64_t file_bytes = 0;
  for (const fs::path& p : weight_files(dir)) file_bytes += fs::file_size(p);

  std::vector<char> read_buffer(16 << 20, 0);
  job::Job job;
  job.slurm.ntasks_per_node = world;
  job.train.mixed_precision = true;  // fp32 master shards
  const fsdp::FsdpOptions options =
      fsdp::fsdp_options(job.fsdp, job.train, world, static_cast<int>(job.slurm.ranks_per_node()));
  dist::ProcessGroups groups = dist::make_mpi_groups(MPI_COMM_WORLD, options.shard_size, 3600.0);
  MPI_Barrier(MPI_COMM_WORLD);
  common::reset_peak_resident();
  const int64_t before = common::resident_bytes();
  model::LlamaForCausalLM skeleton(config, at::TensorOptions().device(at::kMeta));
  const checkpoint::HfFolderSourceFactory source{dir};
  fsdp::validate_source(skeleton, source, *groups.world);
  fsdp::FsdpLlama sharded(skeleton, groups, options);

  if (digest_only) return digest_cost(sharded, dir, reps, rank);

  // The disk of a shared machine drifts: plain reads and loads alternate (read, load, read, ...),
  // each cold, and each load is compared with the mean of the reads either side of it. The plain
  // reads run once the shards exist, as the loads do: on a virtual machine, page cache on memory
  // the guest has not used lately is slower to fill, so a read before the shards took that memory
  // would be measured on faster pages. Peaks are those of the first load.
  std::vector<double> raw_bw, load_bw;
  auto measure_raw = [&] {
    if (rank == 0) {
      drop_from_cache(dir);
      raw_bw.push_back(raw_read_bandwidth(dir, read_buffer));
      drop_from_cache(dir);
    }
    MPI_Barrier(MPI_COMM_WORLD);
  };
  measure_raw();
  int64_t growth = 0;
  for (int rep = 0; rep < reps; ++rep) {
    const fsdp::LoadStats stats = fsdp::load_shards(sharded, source);
    if (rep == 0) growth = common::peak_resident_bytes() - before;
    load_bw.push_back(static_cast<double>(stats.bytes_read) / stats.seconds);
    MPI_Barrier(MPI_COMM_WORLD);
    measure_raw();
  }
  int64_t shard = 0, unit = 0;
  for (fsdp::FlatParam* f : sharded.flat_params()) {
    shard += f->shard().nbytes();
    unit = std::max<int64_t>(unit, f->layout().padded_numel() * f->shard().element_size());
  }
  std::vector<int64_t> all(static_cast<size_t>(3 * world));
  const int64_t mine[3] = {growth, shard, before};
  MPI_Gather(mine, 3, MPI_INT64_T, all.data(), 3, MPI_INT64_T, 0, MPI_COMM_WORLD);
  if (rank == 0) {
    const double model_bytes = static_cast<double>(file_bytes);
    fmt::print("model {}: {:.2f}B parameters, {:.2f} GB of {} weights, {} blocks; world size {}\n", dir,
               static_cast<double>(config.num_parameters()) / 1e9, model_bytes / 1e9, config.torch_dtype,
               config.num_hidden_layers, world);
    fmt::print("largest unit {:.0f} MiB (fp32 master); fixed overhead (RSS before loading) {:.0f} MiB\n",
               static_cast<double>(unit) / (1 << 20), static_cast<double>(all[2]) / (1 << 20));
    for (int r = 0; r < world; ++r) {
      const int64_t g = all[static_cast<size_t>(3 * r)], s = all[static_cast<size_t>(3 * r + 1)];
      const int64_t bound = s + (r == 0 ? 2 : 1) * unit;
      fmt::print("  rank {} ({}): peak growth {:6.0f} MiB, shard {:6.0f} MiB, bound shard+{}x unit {:6.0f} MiB -> {}\n",
                 r, r == 0 ? "reader" : "receiver", static_cast<double>(g) / (1 << 20),
                 static_cast<double>(s) / (1 << 20), r == 0 ? 2 : 1, static_cast<double>(bound) / (1 << 20),
                 g <= bound ? "within" : "OVER");
    }
    fmt::print("reader peak / model bytes: {:.3f}\n", static_cast<double>(all[0]) / model_bytes);
    std::vector<double> ratios;
    for (int rep = 0; rep < reps; ++rep) {
      const double raw = (raw_bw[static_cast<size_t>(rep)] + raw_bw[static_cast<size_t>(rep) + 1]) / 2;
      ratios.push_back(load_bw[static_cast<size_t>(rep)] / raw);
      fmt::print("load {}: {:.2f} GB/s vs plain sequential read {:.2f} GB/s (cold, mean of before and after): {:.2f}\n",
                 rep + 1, load_bw[static_cast<size_t>(rep)] / 1e9, raw / 1e9, ratios.back());
    }
    std::sort(ratios.begin(), ratios.end());
    fmt::print("load / plain read, median of {}: {:.2f} (target >= 0.7)\n", reps, ratios[ratios.size() / 2]);
  }
  return 0;
}
