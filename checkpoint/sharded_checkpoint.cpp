// Checkpoints of FSDP training: writing every rank's slices, committing, and loading at any world size.
#include "checkpoint/sharded_checkpoint.h"

#include <ATen/ops/empty.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <utility>

#include "checkpoint/checkpoint_reader.h"
#include "checkpoint/commit.h"
#include "checkpoint/full_file.h"
#include "common/fault_injection.h"
#include "checkpoint/h5_check.h"
#include "checkpoint/h5_dataset.h"
#include "checkpoint/h5_handle.h"
#include "checkpoint/h5_range.h"
#include "checkpoint/manifest.h"
#include "checkpoint/tensor_io.h"
#include "common/atomic_file.h"
#include "common/error.h"
#include "runtime/dist/agree.h"
#include "runtime/dist/text_collectives.h"
#include "runtime/model/lora.h"

namespace shardtune::checkpoint {
namespace {

namespace fs = std::filesystem;
using common::ErrorKind;

// File access without HDF5's file locks, which fail on some parallel filesystems.
H5Handle file_access() {
  H5Handle fapl(ST_H5_CHECK(H5Pcreate(H5P_FILE_ACCESS)), H5Pclose);
  ST_H5_CHECK(H5Pset_file_locking(fapl.get(), false, true));
  return fapl;
}

// What a checkpoint holds of one flat parameter: its shard, and AdamW's moments of it when the
// optimizer is given and the parameter trains. `trainable_index` counts trainable flats seen.
std::vector<std::pair<std::string, at::Tensor>> state_of(fsdp::FlatParam* f, fsdp::AdamW* optimizer,
                                                         size_t& trainable_index) {
  std::vector<std::pair<std::string, at::Tensor>> out;
  out.emplace_back(kParamKind, f->shard());
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
    for (const char* kind : kStateKinds)
      groups.emplace(kind, H5Handle(ST_H5_CHECK(H5Gcreate2(file.get(), (std::string("/") + kind).c_str(), H5P_DEFAULT,
                                                           H5P_DEFAULT, H5P_DEFAULT)),
                                    H5Gclose));
  }
  // A dataset of `shape` in group /<kind>/ holding `data` (1-D, any device and dtype), whose block
  // checksums come back.
  std::vector<uint32_t> write(const std::string& kind, const std::string& name, const std::vector<int64_t>& shape,
                              const at::Tensor& data) {
    std::vector<hsize_t> dims(shape.begin(), shape.end());
    H5Handle space(ST_H5_CHECK(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr)), H5Sclose);
    H5Handle ds(ST_H5_CHECK(H5Dcreate2(groups.at(kind).get(), name.c_str(), H5T_IEEE_F32LE, space.get(), H5P_DEFAULT,
                                       H5P_DEFAULT, H5P_DEFAULT)),
                H5Dclose);
    std::vector<uint32_t> crcs = write_tensor(ds.get(), data);
    ST_H5_CHECK(ds.close());
    return crcs;
  }
  // Closes the groups and the file, reporting (not swallowing) failures such as a full disk.
  void close() {
    for (auto& [kind, g] : groups) ST_H5_CHECK(g.close());
    ST_H5_CHECK(file.close());
  }
};

// The flat parameters a checkpoint holds: all of them, or only the trainable ones (the adapters of
// a LoRA model, whose frozen base is the base model's own).
std::vector<fsdp::FlatParam*> saved_flats(fsdp::FsdpLlama& model, bool adapters_only) {
  std::vector<fsdp::FlatParam*> out;
  for (fsdp::FlatParam* f : model.flat_params())
    if (!adapters_only || f->trainable()) out.push_back(f);
  return out;
}

// AdamW's own step of each trainable tensor whose count is not the optimizer's (a layer that
// started training after the others), for the manifest.
std::map<std::string, int64_t> moment_steps(fsdp::FsdpLlama& model, const fsdp::AdamW& optimizer, bool adapters_only) {
  std::map<std::string, int64_t> out;
  size_t index = 0;
  for (fsdp::FlatParam* f : saved_flats(model, adapters_only)) {
    if (!f->trainable()) continue;
    if (index < optimizer.size() && optimizer.param_step(index) != optimizer.step_count())
      for (const fsdp::ParamSpan& p : f->layout().params()) out[p.name] = optimizer.param_step(index);
    ++index;
  }
  return out;
}

// Writes this rank's slices; returns their records.
std::vector<ManifestSlice> write_rank_file(fsdp::FsdpLlama& model, fsdp::AdamW* optimizer, bool adapters_only,
                                           const std::string& path, const std::string& file_name) {
  std::vector<ManifestSlice> slices;
  CheckpointFile out(path);
  size_t trainable_index = 0;
  for (fsdp::FlatParam* f : saved_flats(model, adapters_only)) {
    const auto sources = state_of(f, optimizer, trainable_index);
    for (const fsdp::ShardPiece& piece : f->layout().pieces_in_shard(f->shard_rank())) {
      const fsdp::ParamSpan& p = f->layout().params()[piece.param];
      for (const auto& [kind, tensor] : sources) {
        ManifestSlice s{kind, p.name, file_name, fmt::format("{}@{}", p.name, piece.param_offset), piece.param_offset,
                        piece.length, kCrcBlock, {}};
        s.crcs = out.write(kind, s.dataset, {piece.length}, tensor.narrow(0, piece.shard_offset, piece.length));
        slices.push_back(std::move(s));
      }
    }
  }
  out.close();
  common::fsync_path(path, false);
  return slices;
}

// A consolidated file: each flat parameter (and moment) gathered to world rank 0 from the shard
// group that holds it, one at a time, and written there as whole tensors of their own shape.
// Collective over that shard group; only world rank 0 receives and writes. A failure to write is
// recorded, not thrown, so that the gathers go on in step on every rank.
std::vector<ManifestSlice> write_full_file(fsdp::FsdpLlama& model, fsdp::AdamW* optimizer, bool adapters_only,
                                           dist::Communicator& shard_group, bool writer, const std::string& path,
                                           const std::string& file_name, std::string& failure) {
  const std::vector<int>& members = shard_group.world_ranks();
  const int root = static_cast<int>(std::find(members.begin(), members.end(), 0) - members.begin());
  ST_CHECK(root < shard_group.size(), ErrorKind::kInternal, "full checkpoint: world rank 0 is not in shard group '{}'",
           shard_group.name());
  std::vector<ManifestSlice> slices;
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
  for (fsdp::FlatParam* f : saved_flats(model, adapters_only)) {
    const auto sources = state_of(f, optimizer, trainable_index);
    for (const auto& [kind, shard] : sources) {
      at::Tensor full;  // one unit at a time, on the writer only
      if (writer) full = at::empty({f->layout().padded_numel()}, shard.options());
      shard_group.gather(shard, full, root);
      guarded([&] {
        for (const fsdp::ParamSpan& p : f->layout().params()) {
          ManifestSlice s{kind, p.name, file_name, p.name, 0, p.numel, kCrcBlock, {}};
          s.crcs = out->write(kind, p.name, p.shape, full.narrow(0, p.offset, p.numel));
          slices.push_back(std::move(s));
        }
      });
    }
  }
  guarded([&] {
    out->close();
    common::fsync_path(path, false);
  });
  return slices;
}

// A consolidated file's units: each saved flat parameter's state, kind by kind.
std::vector<FullUnit> full_units(fsdp::FsdpLlama& model, fsdp::AdamW* optimizer, bool adapters_only) {
  std::vector<FullUnit> units;
  size_t trainable_index = 0;
  for (fsdp::FlatParam* f : saved_flats(model, adapters_only))
    for (auto& [kind, shard] : state_of(f, optimizer, trainable_index))
      units.push_back({kind, &f->layout(), f->shard_rank(), shard});
  return units;
}

size_t tensor_count(const std::vector<FullUnit>& units) {
  size_t n = 0;
  for (const FullUnit& u : units) n += u.layout->params().size();
  return n;
}

std::string host_name() {
  char name[256] = {};
  gethostname(name, sizeof(name) - 1);
  return name;
}

// World rank 0, for a consolidated save: creates the file and says where each tensor goes, when
// every writer is on its host (they write their pieces into it side by side); otherwise "gather"
// (writers on several hosts could share a page of the file over a network filesystem).
std::string full_file_plan(dist::Communicator& world, bool writer, const std::vector<FullUnit>& units,
                           const std::string& path, int64_t step) {
  const std::vector<std::string> hosts = dist::gather_text(world, writer ? host_name() : std::string());
  return dist::decide_on_root(world, [&] {
    for (const std::string& h : hosts)
      if (!h.empty() && h != hosts.front()) return std::string("gather");
    try {
      return offsets_text(create_full_file(path, units));
    } catch (const std::exception& e) {
      common::raise(ErrorKind::kIo,
                    fmt::format("checkpoint at step {} failed; nothing was committed: {}", step, e.what()));
    }
  });
}

}  // namespace

VerifyReport verify_sharded_checkpoint(const std::string& dir, const std::function<void(int64_t bytes)>& on_read) {
  constexpr int64_t kVerifyPiece = int64_t(8) << 20;  // elements
  const Manifest manifest = read_manifest(dir);
  VerifyReport report;
  H5Handle fapl = file_access();
  std::map<std::string, H5Handle> files;
  std::vector<float> buffer;
  for (const ManifestSlice& s : manifest.slices) {
    const std::string where = fmt::format("{}/{}: {} of {} (elements {}..{})", dir, s.file, s.kind, s.tensor, s.offset,
                                          s.offset + s.length);
    try {
      auto it = files.find(s.file);
      if (it == files.end()) {
        const std::string path = dir + "/" + s.file;
        ST_CHECK(fs::exists(path), ErrorKind::kIo, "file missing");
        H5Handle file(ST_H5_CHECK(H5Fopen(path.c_str(), H5F_ACC_RDONLY, fapl.get())), H5Fclose);
        it = files.emplace(s.file, std::move(file)).first;
      }
      H5Handle ds = open_checked_dataset(it->second.get(), s.kind, s.dataset);
      const int64_t stored = dataset_numel(ds.get());
      ST_CHECK(stored == s.length, ErrorKind::kIo, "the dataset has {} elements", stored);
      BlockCrc crc(s.block);  // read in bounded pieces: memory stays small whatever the slice
      for (int64_t at = 0; at < s.length; at += kVerifyPiece) {
        const int64_t n = std::min(kVerifyPiece, s.length - at);
        buffer.resize(static_cast<size_t>(n));
        read_flat_range(ds.get(), at, n, buffer.data());
        crc.add(buffer.data(), n);
        if (on_read) on_read(n * 4);
      }
      const std::vector<uint32_t> got = crc.finish();
      for (size_t b = 0; b < got.size(); ++b)
        ST_CHECK(got[b] == s.crcs[b], ErrorKind::kIo, "checksum mismatch in elements {}..{}",
                 s.offset + static_cast<int64_t>(b) * s.block,
                 s.offset + std::min(static_cast<int64_t>(b + 1) * s.block, s.length));
      report.bytes += s.length * 4;
    } catch (const std::exception& e) {
      report.problems.push_back(fmt::format("{}: {}", where, e.what()));
    }
    ++report.slices;
  }
  return report;
}

std::string save_checkpoint(fsdp::FsdpLlama& model, fsdp::AdamW* optimizer, const TrainingState& state,
                            dist::ProcessGroups& groups, const std::string& root, int64_t keep_last, bool consolidated) {
  dist::Communicator& world = *groups.world;
  const int rank = world.world_ranks()[static_cast<size_t>(world.rank())];
  const bool adapters_only = state.adapter.has_value();
  // World rank 0 opens a temporary directory of its own and tells every rank where it is.
  std::optional<PendingCheckpoint> pending;  // removes the temporary directory unless committed
  const std::string tmp_dir = dist::decide_on_root(world, [&] {
    try {
      pending.emplace(root, state.step);
    } catch (const std::exception& e) {
      common::raise(ErrorKind::kIo, fmt::format("cannot start checkpoint {} under {}: {}", step_dir_name(state.step),
                                                root, e.what()));
    }
    common::kill_point("started", state.step, rank);
    return pending->dir();
  });

  // One replica writes: the others hold the same shards.
  const bool writer = groups.replicate->rank() == 0;
  std::vector<FullUnit> units;
  std::vector<int64_t> offsets;  // a consolidated file written side by side: where each tensor goes
  if (consolidated) {
    units = full_units(model, optimizer, adapters_only);
    const std::string plan = full_file_plan(world, writer, units, tmp_dir + "/model.h5", state.step);
    if (plan != "gather") offsets = parse_offsets_text(plan);
    static bool said = false;  // once a run
    if (plan == "gather" && rank == 0 && !std::exchange(said, true))
      spdlog::info("full checkpoints: the writers are on several hosts, so each unit is gathered to rank 0, which "
                   "writes model.h5 alone");
  }
  const bool side_by_side = consolidated && !units.empty() && offsets.size() == tensor_count(units);
  std::string records;
  dist::act_on_all(world, fmt::format("checkpoint at step {} failed; nothing was committed", state.step), [&] {
    if (writer && side_by_side) {
      records = crc_parts_text(write_full_pieces(tmp_dir + "/model.h5", units, offsets));
    } else if (writer) {
      const std::string file_name = consolidated ? "model.h5" : fmt::format("rank-{:05d}.h5", rank);
      std::vector<ManifestSlice> written;
      std::string failure;
      if (consolidated) {
        written = write_full_file(model, optimizer, adapters_only, *groups.shard, rank == 0, tmp_dir + "/" + file_name,
                                  file_name, failure);
        ST_CHECK(failure.empty(), ErrorKind::kIo, "{}", failure);
      } else {
        written = write_rank_file(model, optimizer, adapters_only, tmp_dir + "/" + file_name, file_name);
      }
      records = slices_text(written);
    }
    common::kill_point("files-written", state.step, rank);
  });
  const std::vector<std::string> all = dist::gather_text(world, records);
  dist::decide_on_root(world, [&] {
    try {
      Manifest m;
      m.layout = consolidated ? "full" : "sharded";
      m.step = state.step;
      m.epoch = state.epoch;
      m.sample_in_epoch = state.sample_in_epoch;
      m.loss_scale = state.loss_scale;
      m.reference_batch = state.reference_batch;
      m.validation_pending = state.validation_pending;
      m.optimizer_step = optimizer ? optimizer->step_count() : 0;
      m.has_optimizer = optimizer != nullptr;
      m.world_size = world.size();
      m.shard_group_size = groups.shard->size();
      m.job_toml = state.job_toml;
      if (!state.model_config.empty()) m.model_config = nlohmann::json::parse(state.model_config);
      m.adapter = state.adapter;
      for (fsdp::FlatParam* f : saved_flats(model, adapters_only))
        for (const fsdp::ParamSpan& p : f->layout().params()) m.tensors[p.name] = {p.shape, "F32"};
      if (optimizer != nullptr) m.moment_steps = moment_steps(model, *optimizer, adapters_only);
      if (side_by_side) {
        std::vector<CrcPart> parts;
        for (const std::string& r : all)
          for (const CrcPart& part : parse_crc_parts_text(r)) parts.push_back(part);
        m.slices = full_slices(units, "model.h5", std::move(parts));
      } else {
        for (const std::string& r : all)
          if (!r.empty())
            for (ManifestSlice& s : parse_slices_text(r)) m.slices.push_back(std::move(s));
      }
      const PendingCheckpoint::Committed done = pending->commit(m, keep_last);
      for (const std::string& w : done.warnings) spdlog::warn("checkpoint {} is committed, but {}", done.dir, w);
      for (const std::string& a : done.set_aside)
        spdlog::warn("set aside {}: a later step of the history this run rolled back from (it resumed an older "
                     "checkpoint); kept, never resumed",
                     a);
    } catch (const std::exception& e) {
      common::raise(ErrorKind::kIo,
                    fmt::format("checkpoint at step {} could not be committed: {}", state.step, e.what()));
    }
    return std::string();
  });
  return root + "/" + step_dir_name(state.step);
}

namespace {

// Whether a checkpoint holds AdamW's moments of a flat parameter's tensors: all of them or none
// (tensors frozen when it was saved have none; anything between is damage), and their own step.
struct MomentsOf {
  bool saved = false;
  std::optional<int64_t> step;      // the manifest's moment_steps entry, when the tensors have one
  std::vector<std::string> names;   // the flat parameter's tensors
};

MomentsOf moments_of(const CheckpointReader& reader, const fsdp::FlatParam& f) {
  MomentsOf out;
  size_t with = 0;
  for (const fsdp::ParamSpan& p : f.layout().params()) {
    out.names.push_back(p.name);
    const bool avg = reader.has("exp_avg", p.name), sq = reader.has("exp_avg_sq", p.name);
    ST_CHECK(avg == sq, ErrorKind::kIo, "{} holds {} of {} but not {}", reader.dir(), avg ? "exp_avg" : "exp_avg_sq",
             p.name, avg ? "exp_avg_sq" : "exp_avg");
    with += avg ? 1 : 0;
    if (auto it = reader.manifest().moment_steps.find(p.name); it != reader.manifest().moment_steps.end())
      out.step = it->second;
  }
  ST_CHECK(with == 0 || with == out.names.size(), ErrorKind::kIo,
           "{} holds optimizer moments of {} of the {} tensors that train together with {}: damaged", reader.dir(), with,
           out.names.size(), out.names.front());
  out.saved = with > 0;
  return out;
}

// This rank's part of a load: no collectives, so that a rank that fails cannot leave the others
// waiting (load_sharded_checkpoint agrees on the outcome).
TrainingState load_shards_of(fsdp::FsdpLlama& model, fsdp::AdamW* optimizer, const std::string& dir) {
  CheckpointReader reader(dir);
  const Manifest& manifest = reader.manifest();
  bool model_has_adapters = false;
  for (fsdp::FlatParam* f : model.flat_params())
    for (const fsdp::ParamSpan& p : f->layout().params())
      model_has_adapters = model_has_adapters || model::is_adapter_parameter(p.name);
  const bool adapters_only = manifest.adapter.has_value();
  ST_CHECK(adapters_only == model_has_adapters, ErrorKind::kConfig, "{}",
           adapters_only ? fmt::format("{} is a LoRA adapter checkpoint (base model {}): it resumes only a job with "
                                       "[peft] method = \"lora\"",
                                       dir, manifest.adapter->base_path)
                         : fmt::format("{} holds a whole model, not LoRA adapters: a LoRA job cannot resume it (to "
                                       "train adapters on those weights, convert it with shardtune-ckpt export-hf and "
                                       "make that folder [model] path)",
                                       dir));
  // The model's tensors and the checkpoint's must be the same set with the same shapes.
  std::vector<std::string> problems;
  std::map<std::string, std::vector<int64_t>> want;
  for (fsdp::FlatParam* f : saved_flats(model, adapters_only))
    for (const fsdp::ParamSpan& p : f->layout().params()) want[p.name] = p.shape;
  for (const auto& [name, shape] : want) {
    auto it = manifest.tensors.find(name);
    if (it == manifest.tensors.end()) {
      problems.push_back(fmt::format("missing tensor {}", name));
    } else if (it->second.shape != shape) {
      problems.push_back(fmt::format("{} has shape [{}] in the checkpoint, the model [{}]", name,
                                     fmt::join(it->second.shape, ", "), fmt::join(shape, ", ")));
    }
  }
  for (const auto& [name, t] : manifest.tensors)
    if (!want.count(name)) problems.push_back(fmt::format("unexpected tensor {}", name));
  ST_CHECK(problems.empty(), ErrorKind::kConfig, "{} does not fit the model: {}", dir, fmt::join(problems, "; "));

  const bool load_optimizer = optimizer != nullptr && manifest.has_optimizer;
  TrainingState state;
  if (load_optimizer) optimizer->set_step_count(manifest.optimizer_step);
  size_t trainable_index = 0;
  for (fsdp::FlatParam* f : saved_flats(model, adapters_only)) {
    const size_t index = trainable_index;
    auto targets = state_of(f, load_optimizer ? optimizer : nullptr, trainable_index);
    if (load_optimizer && targets.size() > 1) {
      const MomentsOf moments = moments_of(reader, *f);
      if (!moments.saved) state.fresh_moments.insert(state.fresh_moments.end(), moments.names.begin(), moments.names.end());
      optimizer->set_param_step(index, !moments.saved ? 0 : moments.step.value_or(manifest.optimizer_step));
      if (!moments.saved) {  // they start fresh
        for (size_t k = 1; k < targets.size(); ++k) targets[k].second.zero_();
        targets.resize(1);
      }
    } else if (load_optimizer && !f->trainable() && moments_of(reader, *f).saved) {
      for (const fsdp::ParamSpan& p : f->layout().params()) state.unused_moments.push_back(p.name);
    }
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
  state.step = manifest.step;
  state.epoch = manifest.epoch;
  state.sample_in_epoch = manifest.sample_in_epoch;
  state.loss_scale = manifest.loss_scale;
  state.reference_batch = manifest.reference_batch;
  state.validation_pending = manifest.validation_pending;
  state.job_toml = manifest.job_toml;
  state.adapter = manifest.adapter;
  state.has_optimizer = manifest.has_optimizer;
  return state;
}

}  // namespace

TrainingState load_sharded_checkpoint(fsdp::FsdpLlama& model, fsdp::AdamW* optimizer, const std::string& dir,
                                      dist::Communicator& world) {
  TrainingState state;
  dist::act_on_all(world, fmt::format("loading checkpoint {}", dir),
                   [&] { state = load_shards_of(model, optimizer, dir); });
  return state;
}

}  // namespace shardtune::checkpoint
