// Checkpoint save and load bandwidth at the world size it runs with, for sharded and full
// checkpoints and for the alternative layout (one file shared by all ranks through parallel HDF5
// and MPI-IO), each as a ratio to the disk's raw sequential bandwidth measured in the same run on
// the same filesystem (write: dd-style 16 MiB writes then fsync; read: cold sequential reads).
// Run: bench/ckpt.sh, or mpirun -np 4 build/bin/ckpt_bench WORK_DIR [LAYERS [ROUNDS]]
#include <fcntl.h>
#include <fmt/format.h>
#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <functional>
#include <map>
#include <filesystem>
#include <vector>

#include "checkpoint/h5_check.h"
#include "checkpoint/h5_handle.h"
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

// Which MPI-IO component Open MPI uses (OMPI_MCA_io, as mpirun --mca io sets it).
std::string io_component() {
  const char* v = std::getenv("OMPI_MCA_io");
  return v && *v ? v : "default (ompio)";
}

struct SharedFile {
  checkpoint::H5Handle fapl, file, dxpl;
};

SharedFile open_shared(const std::string& path, bool create) {
  SharedFile f;
  f.fapl = checkpoint::H5Handle(ST_H5_CHECK(H5Pcreate(H5P_FILE_ACCESS)), H5Pclose);
  ST_H5_CHECK(H5Pset_fapl_mpio(f.fapl.get(), MPI_COMM_WORLD, MPI_INFO_NULL));
  ST_H5_CHECK(H5Pset_file_locking(f.fapl.get(), false, true));
  f.file = checkpoint::H5Handle(
      ST_H5_CHECK(create ? H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, f.fapl.get())
                         : H5Fopen(path.c_str(), H5F_ACC_RDONLY, f.fapl.get())),
      H5Fclose);
  f.dxpl = checkpoint::H5Handle(ST_H5_CHECK(H5Pcreate(H5P_DATASET_XFER)), H5Pclose);
  ST_H5_CHECK(H5Pset_dxpl_mpio(f.dxpl.get(), H5FD_MPIO_COLLECTIVE));
  return f;
}

// This rank's shard of unit `i` selected in its dataset's file space.
checkpoint::H5Handle shard_selection(hid_t dataset, const fsdp::FlatParam& flat) {
  checkpoint::H5Handle space(ST_H5_CHECK(H5Dget_space(dataset)), H5Sclose);
  const hsize_t start[1] = {static_cast<hsize_t>(flat.layout().shard_begin(flat.shard_rank()))};
  const hsize_t count[1] = {static_cast<hsize_t>(flat.layout().shard_numel())};
  ST_H5_CHECK(H5Sselect_hyperslab(space.get(), H5S_SELECT_SET, start, nullptr, count, nullptr));
  return space;
}

void shared_file_save(fsdp::FsdpLlama& model, const std::string& path) {
  SharedFile f = open_shared(path, true);
  const std::vector<fsdp::FlatParam*> flats = model.flat_params();
  for (size_t i = 0; i < flats.size(); ++i) {
    const hsize_t dims[1] = {static_cast<hsize_t>(flats[i]->layout().padded_numel())};
    checkpoint::H5Handle space(ST_H5_CHECK(H5Screate_simple(1, dims, nullptr)), H5Sclose);
    checkpoint::H5Handle ds(ST_H5_CHECK(H5Dcreate2(f.file.get(), fmt::format("unit-{}", i).c_str(), H5T_IEEE_F32LE,
                                                   space.get(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT)),
                            H5Dclose);
    checkpoint::H5Handle file_space = shard_selection(ds.get(), *flats[i]);
    const hsize_t n[1] = {static_cast<hsize_t>(flats[i]->shard().numel())};
    checkpoint::H5Handle mem(ST_H5_CHECK(H5Screate_simple(1, n, nullptr)), H5Sclose);
    ST_H5_CHECK(H5Dwrite(ds.get(), H5T_NATIVE_FLOAT, mem.get(), file_space.get(), f.dxpl.get(),
                         flats[i]->shard().data_ptr()));
  }
  ST_H5_CHECK(H5Fflush(f.file.get(), H5F_SCOPE_GLOBAL));  // MPI_File_sync: on disk, as the sharded save's fsync
}

void shared_file_load(fsdp::FsdpLlama& model, const std::string& path) {
  SharedFile f = open_shared(path, false);
  const std::vector<fsdp::FlatParam*> flats = model.flat_params();
  for (size_t i = 0; i < flats.size(); ++i) {
    checkpoint::H5Handle ds(ST_H5_CHECK(H5Dopen2(f.file.get(), fmt::format("unit-{}", i).c_str(), H5P_DEFAULT)),
                            H5Dclose);
    checkpoint::H5Handle file_space = shard_selection(ds.get(), *flats[i]);
    const hsize_t n[1] = {static_cast<hsize_t>(flats[i]->shard().numel())};
    checkpoint::H5Handle mem(ST_H5_CHECK(H5Screate_simple(1, n, nullptr)), H5Sclose);
    ST_H5_CHECK(H5Dread(ds.get(), H5T_NATIVE_FLOAT, mem.get(), file_space.get(), f.dxpl.get(),
                        flats[i]->shard().data_ptr()));
  }
}

}  // namespace

int main(int argc, char** argv) {
  dist::MpiRuntime mpi(&argc, &argv);
  if (argc < 2) {
    fmt::print(stderr, "usage: ckpt_bench WORK_DIR [LAYERS [ROUNDS]]\n");
    return 2;
  }
  const int reps = argc > 3 ? std::max(1, std::stoi(argv[3])) : 3;
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
  const fsdp::FsdpOptions options =
      fsdp::fsdp_options(job.fsdp, job.train, world, static_cast<int>(job.slurm.ranks_per_node()));
  dist::ProcessGroups groups = dist::make_mpi_groups(MPI_COMM_WORLD, options.shard_size, 3600.0);
  model::LlamaForCausalLM skeleton(cfg, at::TensorOptions().device(at::kMeta));
  fsdp::FsdpLlama model(skeleton, groups, options);
  for (fsdp::FlatParam* f : model.flat_params()) f->shard().uniform_(-1, 1);
  // The first large write of a process pays for evicting the page cache (seen: 5x slower): a
  // throwaway write of one checkpoint's size comes first. The disk of a shared machine drifts, so
  // raw measurements and checkpoint rounds alternate (raw, round, raw, round, ..., raw); each
  // round is compared with the mean of the raw figures either side of it, and the median counts.
  uint64_t approx_bytes = 0;
  for (fsdp::FlatParam* f : model.flat_params()) approx_bytes += static_cast<uint64_t>(f->layout().numel()) * 4;
  std::vector<std::pair<double, double>> raw;  // (write, read) bytes/s, rank 0
  auto measure_raw = [&] {
    if (rank == 0) {
      ::sync();
      raw.push_back(raw_bandwidth(work + "/raw.bin", approx_bytes));
    }
    MPI_Barrier(MPI_COMM_WORLD);
  };
  if (rank == 0) {
    fs::create_directories(work);
    raw_bandwidth(work + "/warmup.bin", approx_bytes);
  }
  measure_raw();

  struct Pending {
    std::string what;
    double seconds;
    uint64_t bytes;
    bool save;
    size_t raw_before;
  };
  std::vector<Pending> rounds;
  auto timed = [&](const std::string& what, bool save, uint64_t bytes, const std::function<void()>& body) {
    MPI_Barrier(MPI_COMM_WORLD);
    const auto start = Clock::now();
    body();
    MPI_Barrier(MPI_COMM_WORLD);
    rounds.push_back({what, seconds_since(start), bytes, save, raw.size() - 1});
  };
  for (int rep = 0; rep < reps; ++rep) {
    for (bool full : {false, true}) {
      const std::string root = work + (full ? "/full" : "/sharded");
      // Earlier dirty pages (of this run or another) must not be flushed on this save's time.
      if (rank == 0) ::sync();
      std::string dir;
      checkpoint::TrainingState state;
      state.step = 1;
      timed(full ? "full save" : "sharded save", true, 0,
            [&] { dir = checkpoint::save_checkpoint(model, nullptr, state, groups, {root, 1, full}); });
      rounds.back().bytes = dir_bytes(dir);
      if (rank == 0) drop_from_cache(dir);
      timed(full ? "full load" : "sharded load", false, rounds.back().bytes,
            [&] { checkpoint::load_sharded_checkpoint(model, nullptr, dir, *groups.world); });
      MPI_Barrier(MPI_COMM_WORLD);
      if (rank == 0) fs::remove_all(root);
    }
    // The alternative layout: one file shared by every rank, written and read collectively through
    // parallel HDF5 (MPI-IO), each rank its contiguous shard of every unit.
    const std::string shared = work + "/shared.h5";
    if (rank == 0) ::sync();
    timed("shared-file save", true, 0, [&] { shared_file_save(model, shared); });
    rounds.back().bytes = rank == 0 ? fs::file_size(shared) : 0;
    if (rank == 0) drop_from_cache(work);
    timed("shared-file load", false, rounds.back().bytes, [&] { shared_file_load(model, shared); });
    if (rank == 0) fs::remove(shared);
    measure_raw();
  }
  if (rank == 0) {
    fmt::print("world size {}: {:.2f}B parameters, {:.2f} GB per checkpoint (fp32, no optimizer state), {} rounds, "
               "MPI-IO component for the shared file: {}\n",
               world, static_cast<double>(cfg.num_parameters()) / 1e9, static_cast<double>(approx_bytes) / 1e9, reps,
               io_component());
    for (size_t i = 0; i < raw.size(); ++i)
      fmt::print("  raw disk {}: write {:.2f} GB/s (16 MiB writes + fsync), cold read {:.2f} GB/s\n", i + 1,
                 raw[i].first / 1e9, raw[i].second / 1e9);
    std::map<std::string, std::vector<double>> by_what;
    std::vector<std::string> order;
    for (const Pending& r : rounds) {
      const auto& [w0, r0] = raw[r.raw_before];
      const auto& [w1, r1] = raw[r.raw_before + 1];
      const double disk = r.save ? (w0 + w1) / 2 : (r0 + r1) / 2;
      const double bw = static_cast<double>(r.bytes) / r.seconds;
      if (!by_what.count(r.what)) order.push_back(r.what);
      by_what[r.what].push_back(bw / disk);
      fmt::print("  {:<16} {:6.2f} s  {:5.2f} GB/s  ratio to raw {} {:.2f}\n", r.what, r.seconds, bw / 1e9,
                 r.save ? "write" : "read", bw / disk);
    }
    fmt::print("median ratios to the raw disk:\n");
    for (const std::string& what : order) {
      std::vector<double> v = by_what[what];
      std::sort(v.begin(), v.end());
      const bool target = what.rfind("sharded", 0) == 0;
      fmt::print("  {:<16} {:.2f}{}\n", what, v[v.size() / 2], target ? " (target >= 0.8)" : "");
    }
  }
  return 0;
}
