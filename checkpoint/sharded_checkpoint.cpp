// Sharded HDF5 checkpoints: writing, atomic commit, finding, and loading at any world size.
#include "checkpoint/sharded_checkpoint.h"

#include <ATen/ops/empty.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <csignal>
#include <cstdlib>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <nlohmann/json.hpp>

#include "checkpoint/checkpoint_reader.h"
#include "checkpoint/block_crc.h"
#include "checkpoint/h5_check.h"
#include "checkpoint/h5_range.h"
#include "checkpoint/h5_handle.h"
#include "checkpoint/tensor_io.h"
#include "common/error.h"
#include "runtime/dist/mpi_check.h"
#include "runtime/dist/mpi_text.h"

namespace shardtune::checkpoint {
namespace {

namespace fs = std::filesystem;
using common::ErrorKind;
using nlohmann::json;

constexpr const char* kManifest = "manifest.json";
constexpr const char* kKinds[] = {"param", "exp_avg", "exp_avg_sq"};

std::string step_dir_name(int64_t step) { return fmt::format("step-{:07d}", step); }

// Fault injection for the crash tests: SHARDTUNE_TEST_KILL_AT="<phase>@<step>:<rank>" makes that
// rank SIGKILL itself when a save of that step reaches that phase. Unset in real runs.
void kill_point(const char* phase, int64_t step, int rank) {
  static const char* spec = std::getenv("SHARDTUNE_TEST_KILL_AT");
  if (spec == nullptr || spec != fmt::format("{}@{}:{}", phase, step, rank)) return;
  spdlog::default_logger()->flush();
  ::kill(::getpid(), SIGKILL);
}

void fsync_path(const std::string& path, bool directory) {
  const int fd = ::open(path.c_str(), (directory ? O_RDONLY | O_DIRECTORY : O_RDONLY) | O_CLOEXEC);
  ST_CHECK(fd >= 0, ErrorKind::kIo, "cannot open {} to fsync it: {}", path, std::strerror(errno));
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  ST_CHECK(rc == 0, ErrorKind::kIo, "fsync of {} failed: {}", path, std::strerror(err));
}

void write_text_durably(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << text;
    out.flush();
    ST_CHECK(out.good(), ErrorKind::kIo, "cannot write {}", tmp);
  }
  fsync_path(tmp, false);
  ST_CHECK(::rename(tmp.c_str(), path.c_str()) == 0, ErrorKind::kIo, "cannot rename {}: {}", tmp, std::strerror(errno));
}

// File access without HDF5's file locks, which fail on some parallel filesystems.
H5Handle file_access() {
  H5Handle fapl(ST_H5_CHECK(H5Pcreate(H5P_FILE_ACCESS)), H5Pclose);
  ST_H5_CHECK(H5Pset_file_locking(fapl.get(), false, true));
  return fapl;
}

struct Slice {
  std::string kind, tensor, file, dataset;
  int64_t offset = 0, length = 0;
  std::vector<uint32_t> crcs;  // per block of kCrcBlock elements
};

json slice_json(const Slice& s) {
  return {{"kind", s.kind}, {"tensor", s.tensor}, {"file", s.file}, {"dataset", s.dataset},
          {"offset", s.offset}, {"length", s.length}, {"crc32_blocks", s.crcs}};
}

// What a checkpoint holds of one flat parameter: its shard, and AdamW's moments of it when the
// optimizer is given and the parameter trains. `trainable_index` counts trainable flats seen.
std::vector<std::pair<std::string, at::Tensor>> state_of(fsdp::FlatParam* f, fsdp::AdamW* optimizer,
                                                         size_t& trainable_index) {
  std::vector<std::pair<std::string, at::Tensor>> out;
  out.emplace_back("param", f->shard());
  if (f->trainable() && optimizer != nullptr && optimizer->size() > trainable_index) {
    out.emplace_back("exp_avg", optimizer->exp_avg(trainable_index));
    out.emplace_back("exp_avg_sq", optimizer->exp_avg_sq(trainable_index));
  }
  if (f->trainable()) ++trainable_index;
  return out;
}

// A new checkpoint file with its three groups (/param, /exp_avg, /exp_avg_sq).
struct CheckpointFile {
  H5Handle file;
  std::map<std::string, H5Handle> groups;

  explicit CheckpointFile(const std::string& path) {
    H5Handle fapl = file_access();
    file = H5Handle(ST_H5_CHECK(H5Fcreate(path.c_str(), H5F_ACC_EXCL, H5P_DEFAULT, fapl.get())), H5Fclose);
    for (const char* kind : kKinds)
      groups.emplace(kind, H5Handle(ST_H5_CHECK(H5Gcreate2(file.get(), (std::string("/") + kind).c_str(), H5P_DEFAULT,
                                                           H5P_DEFAULT, H5P_DEFAULT)),
                                    H5Gclose));
  }
  // Closes the groups and the file, reporting (not swallowing) failures such as a full disk.
  void close() {
    for (auto& [kind, g] : groups) ST_H5_CHECK(g.close());
    ST_H5_CHECK(file.close());
  }
};

// Writes this rank's slices; returns their records.
std::vector<Slice> write_rank_file(fsdp::FsdpLlama& model, fsdp::AdamW* optimizer, const std::string& path,
                                   const std::string& file_name) {
  std::vector<Slice> slices;
  CheckpointFile out(path);
  size_t trainable_index = 0;
  for (fsdp::FlatParam* f : model.flat_params()) {
    const auto sources = state_of(f, optimizer, trainable_index);
    for (const fsdp::ShardPiece& piece : f->layout().pieces_in_shard(f->shard_rank())) {
      const fsdp::ParamSpan& p = f->layout().params()[piece.param];
      for (const auto& [kind, tensor] : sources) {
        Slice s{kind, p.name, file_name, fmt::format("{}@{}", p.name, piece.param_offset), piece.param_offset,
                piece.length, {}};
        const hsize_t dims[1] = {static_cast<hsize_t>(piece.length)};
        H5Handle space(ST_H5_CHECK(H5Screate_simple(1, dims, nullptr)), H5Sclose);
        H5Handle ds(ST_H5_CHECK(H5Dcreate2(out.groups.at(kind).get(), s.dataset.c_str(), H5T_IEEE_F32LE, space.get(),
                                           H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT)),
                    H5Dclose);
        s.crcs = write_tensor(ds.get(), tensor.narrow(0, piece.shard_offset, piece.length));
        ST_H5_CHECK(ds.close());
        slices.push_back(std::move(s));
      }
    }
  }
  out.close();
  fsync_path(path, false);
  return slices;
}

// A consolidated file: each flat parameter (and moment) gathered to world rank 0 from the shard
// group that holds it, one at a time, and written there as whole tensors of their own shape.
// Collective over that shard group; only world rank 0 receives and writes. A failure to write is
// recorded, not thrown, so that the gathers go on in step on every rank.
std::vector<Slice> write_full_file(fsdp::FsdpLlama& model, fsdp::AdamW* optimizer, dist::Communicator& shard_group,
                                   bool writer, const std::string& path, const std::string& file_name,
                                   std::string& failure) {
  const std::vector<int>& members = shard_group.world_ranks();
  const int root = static_cast<int>(std::find(members.begin(), members.end(), 0) - members.begin());
  ST_CHECK(root < shard_group.size(), ErrorKind::kInternal, "full checkpoint: world rank 0 is not in shard group '{}'",
           shard_group.name());
  std::vector<Slice> slices;
  std::optional<CheckpointFile> out;
  auto guarded = [&](auto&& fn) {
    if (!writer || !failure.empty()) return;
    try {
      fn();
    } catch (const std::exception& e) {
      failure = e.what();
    }
  };
  guarded([&] { out.emplace(path); });
  size_t trainable_index = 0;
  for (fsdp::FlatParam* f : model.flat_params()) {
    const auto sources = state_of(f, optimizer, trainable_index);
    for (const auto& [kind, shard] : sources) {
      at::Tensor full;  // one unit at a time, on the writer only
      if (writer) full = at::empty({f->layout().padded_numel()}, shard.options());
      shard_group.gather(shard, full, root);
      guarded([&] {
        for (const fsdp::ParamSpan& p : f->layout().params()) {
          std::vector<hsize_t> dims(p.shape.begin(), p.shape.end());
          H5Handle space(ST_H5_CHECK(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr)), H5Sclose);
          H5Handle ds(ST_H5_CHECK(H5Dcreate2(out->groups.at(kind).get(), p.name.c_str(), H5T_IEEE_F32LE, space.get(),
                                             H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT)),
                      H5Dclose);
          std::vector<uint32_t> crcs = write_tensor(ds.get(), full.narrow(0, p.offset, p.numel));
          ST_H5_CHECK(ds.close());
          slices.push_back({kind, p.name, file_name, p.name, 0, p.numel, std::move(crcs)});
        }
      });
    }
  }
  guarded([&] {
    out->close();
    fsync_path(path, false);
  });
  return slices;
}

void prune(const std::string& root, int64_t keep_last) {
  std::vector<std::string> committed;
  for (const auto& e : fs::directory_iterator(root)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("step-", 0) == 0 && fs::exists(e.path() / kManifest)) committed.push_back(name);
  }
  std::sort(committed.begin(), committed.end());
  for (size_t i = 0; i + static_cast<size_t>(keep_last) < committed.size(); ++i) {
    std::error_code ec;
    fs::remove_all(fs::path(root) / committed[i], ec);
    if (ec) spdlog::warn("could not prune checkpoint {}: {}", committed[i], ec.message());
  }
}

json read_manifest_impl(const std::string& dir) {
  const std::string path = dir + "/" + kManifest;
  std::ifstream in(path);
  ST_CHECK(in.good(), ErrorKind::kIo, "{} is not a committed checkpoint: {} is missing", dir, kManifest);
  try {
    json m = json::parse(in);
    ST_CHECK(m.value("format", "") == "shardtune-sharded", ErrorKind::kIo, "{}: not a shardtune sharded checkpoint", path);
    const int version = m.value("version", 0);
    ST_CHECK(version >= 1 && version <= kShardedFormatVersion, ErrorKind::kIo,
             "{}: format version {} is not one this build reads (1 to {})", path, version, kShardedFormatVersion);
    return m;
  } catch (const json::exception& e) {
    common::raise(ErrorKind::kIo, fmt::format("{}: broken manifest: {}", path, e.what()));
  }
}

}  // namespace

json read_checkpoint_manifest(const std::string& dir) { return read_manifest_impl(dir); }

VerifyReport verify_sharded_checkpoint(const std::string& dir) {
  constexpr int64_t kVerifyPiece = int64_t(8) << 20;  // elements
  const json manifest = read_manifest_impl(dir);
  VerifyReport report;
  H5Handle fapl = file_access();
  std::map<std::string, H5Handle> files;
  std::vector<float> buffer;
  for (const json& s : manifest.at("slices")) {
    const std::string file = s.at("file"), kind = s.at("kind"), tensor = s.at("tensor"), dataset = s.at("dataset");
    const int64_t offset = s.at("offset"), length = s.at("length");
    const std::string where = fmt::format("{}/{}: {} of {} (elements {}..{})", dir, file, kind, tensor, offset, offset + length);
    try {
      auto it = files.find(file);
      if (it == files.end()) {
        const std::string path = dir + "/" + file;
        ST_CHECK(fs::exists(path), ErrorKind::kIo, "file missing");
        it = files.emplace(file, H5Handle(ST_H5_CHECK(H5Fopen(path.c_str(), H5F_ACC_RDONLY, fapl.get())), H5Fclose)).first;
      }
      H5Handle ds(ST_H5_CHECK(H5Dopen2(it->second.get(), fmt::format("/{}/{}", kind, dataset).c_str(), H5P_DEFAULT)),
                  H5Dclose);
      const int64_t stored = dataset_numel(ds.get());
      ST_CHECK(stored == length, ErrorKind::kIo, "the dataset has {} elements", stored);
      const SliceSums sums = slice_sums(manifest, s, where);
      BlockCrc crc(sums.block);  // read in bounded pieces: memory stays small whatever the slice
      for (int64_t at = 0; at < length; at += kVerifyPiece) {
        const int64_t n = std::min(kVerifyPiece, length - at);
        buffer.resize(static_cast<size_t>(n));
        read_flat_range(ds.get(), at, n, buffer.data());
        crc.add(buffer.data(), n);
      }
      const std::vector<uint32_t> got = crc.finish();
      for (size_t b = 0; b < got.size(); ++b)
        ST_CHECK(got[b] == sums.crcs[b], ErrorKind::kIo, "checksum mismatch in elements {}..{}",
                 offset + static_cast<int64_t>(b) * sums.block,
                 offset + std::min(static_cast<int64_t>(b + 1) * sums.block, length));
      report.bytes += length * 4;
    } catch (const std::exception& e) {
      report.problems.push_back(fmt::format("{}: {}", where, e.what()));
    }
    ++report.slices;
  }
  return report;
}

std::string save_checkpoint(fsdp::FsdpLlama& model, fsdp::AdamW* optimizer, const TrainingState& state,
                            dist::ProcessGroups& groups, const std::string& root, int64_t keep_last, bool consolidated) {
  MPI_Comm world = MPI_COMM_WORLD;
  const int rank = groups.world->world_ranks()[static_cast<size_t>(groups.world->rank())];
  const std::string final_dir = root + "/" + step_dir_name(state.step);
  const std::string tmp_dir = root + "/.tmp-" + step_dir_name(state.step);
  std::string error;
  if (rank == 0) {
    try {
      fs::create_directories(root);
      fs::remove_all(tmp_dir);  // a previous attempt that died
      fs::create_directories(tmp_dir);
      kill_point("started", state.step, rank);
    } catch (const std::exception& e) {
      error = fmt::format("cannot prepare {}: {}", tmp_dir, e.what());
    }
  }
  error = dist::broadcast_text(error, world);
  ST_CHECK(error.empty(), ErrorKind::kIo, "{}", error);

  // One replica writes: the others hold the same shards.
  std::string records;
  int failed = 0;
  if (groups.replicate->rank() == 0) {
    const std::string file_name = consolidated ? "model.h5" : fmt::format("rank-{:05d}.h5", rank);
    try {
      std::vector<Slice> written;
      std::string failure;
      if (consolidated) {
        written = write_full_file(model, optimizer, *groups.shard, rank == 0, tmp_dir + "/" + file_name, file_name,
                                  failure);
        ST_CHECK(failure.empty(), ErrorKind::kIo, "{}", failure);
      } else {
        written = write_rank_file(model, optimizer, tmp_dir + "/" + file_name, file_name);
      }
      json slices = json::array();
      for (const Slice& sl : written) slices.push_back(slice_json(sl));
      records = slices.dump();
    } catch (const std::exception& e) {
      failed = 1;
      records = e.what();
    }
  }
  kill_point("files-written", state.step, rank);
  int any_failed = 0;
  ST_MPI_CHECK(MPI_Allreduce(&failed, &any_failed, 1, MPI_INT, MPI_MAX, world));
  const std::vector<std::string> all = dist::gather_text(records, world);
  if (rank == 0) {
    try {
      if (any_failed) {
        std::vector<std::string> why;
        for (size_t r = 0; r < all.size(); ++r)
          if (!all[r].empty() && all[r][0] != '[') why.push_back(fmt::format("rank {}: {}", r, all[r]));
        error = fmt::format("checkpoint at step {} failed; nothing was committed: {}", state.step, fmt::join(why, "; "));
      } else {
        json manifest = {{"format", "shardtune-sharded"}, {"version", kShardedFormatVersion},
                         {"layout", consolidated ? "full" : "sharded"},
                         {"step", state.step},           {"epoch", state.epoch},
                         {"sample_in_epoch", state.sample_in_epoch}, {"loss_scale", state.loss_scale},
                         {"optimizer_step", optimizer ? optimizer->step_count() : 0},
                         {"has_optimizer", optimizer != nullptr}, {"world_size", groups.world->size()},
                         {"shard_group_size", groups.shard->size()}, {"job", state.job_toml},
                         {"crc32_block", kCrcBlock}};
        if (!state.model_config.empty()) manifest["model_config"] = json::parse(state.model_config);
        json tensors = json::object();
        for (fsdp::FlatParam* f : model.flat_params())
          for (const fsdp::ParamSpan& p : f->layout().params()) tensors[p.name] = {{"shape", p.shape}, {"dtype", "F32"}};
        manifest["tensors"] = tensors;
        json slices = json::array();
        for (const std::string& r : all)
          if (!r.empty())
            for (json& s : json::parse(r)) slices.push_back(std::move(s));
        manifest["slices"] = slices;
        write_text_durably(tmp_dir + "/" + kManifest, manifest.dump(1));
        fsync_path(tmp_dir, true);
        kill_point("manifest-written", state.step, rank);
        fs::remove_all(final_dir);  // only an uncommitted leftover can have this name
        fs::rename(tmp_dir, final_dir);
        fsync_path(root, true);
        kill_point("renamed", state.step, rank);
        // `latest` moves atomically: a new link, renamed over the old one.
        const std::string link_tmp = root + "/.latest.tmp";
        fs::remove(link_tmp);
        fs::create_directory_symlink(step_dir_name(state.step), link_tmp);
        fs::rename(link_tmp, root + "/latest");
        fsync_path(root, true);
        kill_point("latest-updated", state.step, rank);
        prune(root, keep_last);
      }
    } catch (const std::exception& e) {
      error = fmt::format("checkpoint at step {} could not be committed: {}", state.step, e.what());
    }
    if (!error.empty()) {
      std::error_code ec;
      fs::remove_all(tmp_dir, ec);
    }
  }
  error = dist::broadcast_text(error, world);
  ST_CHECK(error.empty(), ErrorKind::kIo, "{}", error);
  return final_dir;
}

std::optional<std::string> find_latest_checkpoint(const std::string& root) {
  if (!fs::exists(root)) return std::nullopt;
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(root)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("step-", 0) == 0) names.push_back(name);
  }
  std::sort(names.rbegin(), names.rend());
  for (const std::string& name : names) {
    const std::string dir = root + "/" + name;
    try {
      read_manifest_impl(dir);
      return dir;
    } catch (const common::Error& e) {
      spdlog::warn("skipping {}: {}", dir, e.what());
    }
  }
  return std::nullopt;
}

TrainingState load_sharded_checkpoint(fsdp::FsdpLlama& model, fsdp::AdamW* optimizer, const std::string& dir,
                                      MPI_Comm world) {
  const json manifest = read_manifest_impl(dir);
  // The model's tensors and the checkpoint's must be the same set with the same shapes.
  std::vector<std::string> problems;
  std::map<std::string, std::vector<int64_t>> want;
  for (fsdp::FlatParam* f : model.flat_params())
    for (const fsdp::ParamSpan& p : f->layout().params()) want[p.name] = p.shape;
  const json& tensors = manifest.at("tensors");
  for (const auto& [name, shape] : want) {
    if (!tensors.contains(name)) {
      problems.push_back(fmt::format("missing tensor {}", name));
    } else if (tensors[name].at("shape").get<std::vector<int64_t>>() != shape) {
      problems.push_back(fmt::format("{} has shape {} in the checkpoint, the model [{}]", name,
                                     tensors[name].at("shape").dump(), fmt::join(shape, ", ")));
    }
  }
  for (const auto& [name, t] : tensors.items())
    if (!want.count(name)) problems.push_back(fmt::format("unexpected tensor {}", name));
  ST_CHECK(problems.empty(), ErrorKind::kConfig, "{} does not fit the model: {}", dir, fmt::join(problems, "; "));

  const bool load_optimizer = optimizer != nullptr && manifest.value("has_optimizer", false);
  CheckpointReader reader(dir);
  size_t trainable_index = 0;
  for (fsdp::FlatParam* f : model.flat_params()) {
    auto targets = state_of(f, load_optimizer ? optimizer : nullptr, trainable_index);
    for (const fsdp::ShardPiece& piece : f->layout().pieces_in_shard(f->shard_rank())) {
      const fsdp::ParamSpan& p = f->layout().params()[piece.param];
      for (auto& [kind, target] : targets) {
        read_tensor(target.narrow(0, piece.shard_offset, piece.length),
                    [&, &kind = kind](int64_t offset, int64_t count, float* out) {
                      reader.read_range(kind, p.name, piece.param_offset + offset, count, out);
                    });
      }
    }
  }
  for (fsdp::FlatParam* f : model.flat_params()) f->reshard();  // written through their raw data
  if (load_optimizer) optimizer->set_step_count(manifest.value("optimizer_step", int64_t{0}));
  ST_MPI_CHECK(MPI_Barrier(world));
  TrainingState state;
  state.step = manifest.at("step");
  state.epoch = manifest.at("epoch");
  state.sample_in_epoch = manifest.at("sample_in_epoch");
  state.loss_scale = manifest.value("loss_scale", 0.0);
  state.job_toml = manifest.value("job", "");
  return state;
}

}  // namespace shardtune::checkpoint
