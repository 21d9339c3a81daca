// A checkpoint save: begun at a step boundary, copied, written, committed.
#include "checkpoint/checkpoint_save.h"

#include <ATen/ops/empty.h>
#include <ATen/ops/from_blob.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <functional>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <utility>

#include "checkpoint/background_save.h"
#include "checkpoint/block_crc.h"
#include "checkpoint/h5_check.h"
#include "checkpoint/h5_dataset.h"
#include "checkpoint/h5_handle.h"
#include "checkpoint/saved_state.h"
#include "checkpoint/update_crcs.h"
#include "checkpoint/tensor_io.h"
#include "common/atomic_file.h"
#include "common/direct_file.h"
#include "common/error.h"
#include "common/fault_injection.h"
#include "runtime/dist/agree.h"
#include "runtime/dist/text_collectives.h"
#include "runtime/fsdp/shard_layout.h"

namespace shardtune::checkpoint {
namespace {

using common::ErrorKind;

// The groups of a checkpoint file: /param, /exp_avg and /exp_avg_sq, and the other kinds' (scales,
// factors) where the units have them.
std::vector<std::string> file_groups(const std::vector<std::string>& kinds) {
  std::vector<std::string> out(std::begin(kStateKinds), std::begin(kStateKinds) + 3);
  for (auto kind = std::begin(kStateKinds) + 3; kind != std::end(kStateKinds); ++kind)
    if (std::find(kinds.begin(), kinds.end(), *kind) != kinds.end()) out.emplace_back(*kind);
  return out;
}

// A new checkpoint file with its groups (/param, /exp_avg, /exp_avg_sq; a scale kind's at its
// first dataset).
struct CheckpointFile {
  H5Handle file;
  std::map<std::string, H5Handle> groups;

  explicit CheckpointFile(const std::string& path) {
    file = create_checkpoint_file(path);
    for (const std::string& kind : file_groups({})) groups.emplace(kind, create_group(file.get(), kind));
  }
  // A dataset of `shape` in group /<kind>/ holding `data` (1-D, any device and dtype), whose block
  // checksums come back.
  std::vector<uint32_t> write(const std::string& kind, const std::string& name, const std::vector<int64_t>& shape,
                              const at::Tensor& data) {
    std::vector<hsize_t> dims(shape.begin(), shape.end());
    H5Handle space(ST_H5_CHECK(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr)), H5Sclose);
    if (!groups.count(kind)) groups.emplace(kind, create_group(file.get(), kind));
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

// AdamW's own step of each trainable tensor whose count is not the optimizer's (a layer that
// started training after the others), for the manifest.
std::map<std::string, int64_t> moment_steps(fsdp::FsdpLlama& model, const fsdp::Optimizer& optimizer, bool adapters_only) {
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

// This rank's file: a dataset per unit, holding its whole shard (padding included), of which each
// parameter's piece is a slice. Each dataset is laid out first, at a multiple of the O_DIRECT
// alignment, then written around the page cache where the file system allows it
// (common/direct_file.h). A shard in host memory as fp32 goes in place, without a copy: `pad`
// unwritten elements before it put its first element at the place within a page of the file it has
// within its page of memory, so the disk reads whole pages straight from the shard. Any other shard
// goes through a staging buffer. `released` (may be empty) is called once the shards are no longer
// read. Returns the slices' records.
std::vector<ManifestSlice> write_rank_file(const std::vector<FullUnit>& units, const std::string& path,
                                           const std::string& file_name, const std::function<void()>& released) {
  struct Placed {
    bool in_place;
    int64_t pad;                    // elements before the shard in its dataset
    size_t first_slice, end_slice;  // its pieces' slices
  };
  std::vector<ManifestSlice> slices;
  std::vector<DatasetSpec> specs;
  std::vector<Placed> placed;
  std::map<std::string, int> per_kind;
  for (const FullUnit& u : units) {
    const at::Tensor& shard = u.shard;
    const bool in_place = shard.device().is_cpu() && shard.scalar_type() == at::kFloat && shard.is_contiguous();
    const int64_t pad =
        in_place && shard.numel() > 0
            ? static_cast<int64_t>(reinterpret_cast<uintptr_t>(shard.data_ptr<float>()) % common::kDirectAlignment) / 4
            : 0;
    specs.push_back({u.kind, fmt::format("flat-{:04d}", per_kind[u.kind]++), {pad + shard.numel()}});
    placed.push_back({in_place, pad, slices.size(), 0});
    for (const fsdp::ShardPiece& piece : unit_pieces(u)) {
      const fsdp::ParamSpan& p = u.layout->params()[piece.param];
      ManifestSlice slice{u.kind, p.name, file_name, specs.back().name, piece.param_offset, piece.length, kCrcBlock, {}};
      slice.dataset_offset = pad + piece.shard_offset;
      slices.push_back(std::move(slice));
    }
    placed.back().end_slice = slices.size();
  }
  std::vector<std::string> kinds;
  for (const FullUnit& u : units) kinds.push_back(u.kind);
  const std::vector<int64_t> offsets =
      create_contiguous_file(path, file_groups(kinds), specs, static_cast<int64_t>(common::kDirectAlignment));
  common::DirectWriter out(path);
  at::Tensor staging;  // fp32 on the host, for shards of another dtype or on a GPU
  for (size_t k = 0; k < units.size(); ++k) {
    const at::Tensor& shard = units[k].shard;
    const Placed& at_k = placed[k];
    const int64_t start = offsets[k] + at_k.pad * 4;  // the shard's first element in the file
    if (at_k.in_place) {
      const float* data = shard.numel() > 0 ? shard.data_ptr<float>() : nullptr;
      if (shard.numel() > 0) out.write_in_place(data, static_cast<size_t>(shard.numel()) * 4, start);
      // Checksums taken as the optimizer wrote this memory, when given (one list per slice).
      const std::vector<std::vector<uint32_t>>& known = units[k].crcs;
      const bool taken = known.size() == at_k.end_slice - at_k.first_slice;
      for (size_t i = at_k.first_slice; i < at_k.end_slice; ++i)
        slices[i].crcs = taken ? known[i - at_k.first_slice]
                               : block_crcs(data + (slices[i].dataset_offset - at_k.pad), slices[i].length);
      continue;
    }
    if (!staging.defined())
      staging = at::empty({kStageElements}, at::TensorOptions().dtype(at::kFloat).pinned_memory(!shard.device().is_cpu()));
    for (size_t i = at_k.first_slice; i < at_k.end_slice; ++i) {
      ManifestSlice& slice = slices[i];
      const int64_t first = slice.dataset_offset - at_k.pad;  // in the shard
      BlockCrc crc;
      for (int64_t at = 0; at < slice.length; at += kStageElements) {
        const int64_t count = std::min(kStageElements, slice.length - at);
        at::Tensor piece = staging.narrow(0, 0, count);
        piece.copy_(shard.narrow(0, first + at, count));  // converts to fp32; waits for the device
        out.write(piece.data_ptr<float>(), static_cast<size_t>(count) * 4, start + (first + at) * 4);
        crc.add(piece.data_ptr<float>(), count);
      }
      slice.crcs = crc.finish();
    }
  }
  out.finish();  // the in-place writes read the shards until here
  if (released) released();
  int64_t bytes = 0;
  for (const FullUnit& u : units) bytes += u.shard.numel() * 4;
  spdlog::debug("{}: {} of the shards' {} bytes written in place, without a copy", file_name, out.bytes_in_place(),
                bytes);
  return slices;
}

// A consolidated file: each flat parameter (and moment) gathered to world rank 0 from the shard
// group that holds it, one at a time, and written there as whole tensors of their own shape.
// Collective over that shard group; only world rank 0 receives and writes. A failure to write is
// recorded, not thrown, so that the gathers go on in step on every rank.
std::vector<ManifestSlice> write_full_file(fsdp::FsdpLlama& model, fsdp::Optimizer* optimizer, bool adapters_only,
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
    for (const FlatState& source : state_of(f, optimizer, trainable_index)) {
      const std::string& kind = source.kind;
      // (An 8-bit AdamW's decoded moments are on the host: gathered from the shards' device.)
      const at::Tensor shard = source.tensor.to(f->shard().device());
      at::Tensor full;  // one unit at a time, on the writer only
      if (writer) full = at::empty({source.layout->padded_numel()}, shard.options());
      shard_group.gather(shard, full, root);
      guarded([&] {
        for (const fsdp::ParamSpan& p : source.layout->params()) {
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

// Host memory for a copy of `src`: pinned when it is on a GPU; else in huge pages where the kernel
// gives them (transparent huge pages on request), since the first copy touches every page of
// gigabytes and a fault per 4 KiB page costs seconds.
at::Tensor host_buffer(const at::Tensor& src) {
  const auto options = at::TensorOptions().dtype(src.scalar_type());
  if (src.is_cuda()) return at::empty({src.numel()}, options.pinned_memory(true));
  constexpr size_t kHuge = size_t(2) << 20;
  const size_t bytes = (static_cast<size_t>(src.numel()) * src.element_size() + kHuge - 1) / kHuge * kHuge;
  void* p = std::aligned_alloc(kHuge, std::max(bytes, kHuge));
  ST_CHECK(p != nullptr, ErrorKind::kIo, "cannot allocate {} bytes of host memory for a checkpoint copy", bytes);
  ::madvise(p, bytes, MADV_HUGEPAGE);  // a hint: without it, ordinary pages
  return at::from_blob(p, {src.numel()}, [](void* q) { std::free(q); }, options);
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

CheckpointSave::CheckpointSave(fsdp::FsdpLlama& model, fsdp::Optimizer* optimizer, const TrainingState& state,
                               dist::ProcessGroups& groups, const SaveRequest& request)
    : groups_(groups),
      model_(model),
      optimizer_(optimizer),
      root_(request.root),
      keep_last_(request.keep_last),
      consolidated_(request.consolidated),
      adapters_only_(state.adapter.has_value()),
      // Replicas hold the same shards: each writes a part of them, or the first writes them whole.
      split_(request.fully_parallel && groups.replicate->size() > 1),
      writer_(split_ || groups.replicate->rank() == 0),
      world_rank_(groups.world->world_ranks()[static_cast<size_t>(groups.world->rank())]) {
  dist::Communicator& world = *groups.world;
  manifest_.step = state.step;
  // World rank 0 opens a temporary directory of its own and tells every rank where it is.
  tmp_dir_ = dist::decide_on_root(world, [&] {
    try {
      pending_.emplace(root_, state.step);
    } catch (const std::exception& e) {
      common::raise(ErrorKind::kIo, fmt::format("cannot start checkpoint {} under {}: {}", step_dir_name(state.step),
                                                root_, e.what()));
    }
    common::kill_point("started", state.step, world_rank_);
    return pending_->dir();
  }, fmt::format("starting checkpoint step {}", state.step));
  units_ = saved_units(model, optimizer, adapters_only_);
  if (split_) {
    for (FullUnit& u : units_) {
      const fsdp::ShardPart part = fsdp::replica_part(u.shard.numel(), groups.replicate->size(), groups.replicate->rank());
      u.shard = u.shard.narrow(0, part.begin, part.length());
      u.shard_begin = part.begin;
    }
  }
  // (Checksums taken of whole shards fit no part of one: a split save computes its own.)
  if (request.taken != nullptr && !consolidated_ && !split_) request.taken->fill(units_);
  if (consolidated_) {
    const std::string plan = full_file_plan(world, writer_, units_, tmp_dir_ + "/model.h5", state.step);
    if (plan != "gather") offsets_ = parse_offsets_text(plan);
    gather_ = units_.empty() || offsets_.size() != tensor_count(units_);
    if (gather_) writer_ = groups.replicate->rank() == 0;  // the shard group of world rank 0 gathers to it
    static bool said = false;  // once a run
    if (gather_ && world_rank_ == 0 && !std::exchange(said, true))
      spdlog::info("full checkpoints: the writers are on several hosts, so each unit is gathered to rank 0, which "
                   "writes model.h5 alone");
  }
  if (!writer_ || gather_) units_.clear();  // nothing of its own to write, or written by the gather
  if (world_rank_ != 0) return;
  // The manifest as of this step boundary: the optimizer's counts change as training goes on.
  Manifest& m = manifest_;
  m.layout = consolidated_ ? "full" : "sharded";
  m.epoch = state.epoch;
  m.sample_in_epoch = state.sample_in_epoch;
  m.loss_scale = state.loss_scale;
  m.reference_batch = state.reference_batch;
  m.validation_pending = state.validation_pending;
  m.optimizer_step = optimizer ? optimizer->step_count() : 0;
  m.has_optimizer = optimizer != nullptr;
  if (optimizer != nullptr) {
    m.optimizer = optimizer->name();
    m.state_block = optimizer_state_block(*optimizer);
  }
  m.world_size = world.size();
  m.shard_group_size = groups.shard->size();
  m.job_toml = state.job_toml;
  if (!state.model_config.empty()) m.model_config = nlohmann::json::parse(state.model_config);
  m.adapter = state.adapter;
  m.data = state.data;
  for (fsdp::FlatParam* f : saved_flats(model, adapters_only_))
    for (const fsdp::ParamSpan& p : f->layout().params()) m.tensors[p.name] = {p.shape, "F32"};
  if (optimizer != nullptr) m.moment_steps = moment_steps(model, *optimizer, adapters_only_);
}

CheckpointSave::~CheckpointSave() = default;

std::string CheckpointSave::dir() const { return root_ + "/" + step_dir_name(manifest_.step); }

int64_t CheckpointSave::host_bytes() const {
  int64_t n = 0;
  for (const FullUnit& u : units_) n += u.shard.numel() * static_cast<int64_t>(u.shard.element_size());
  return n;
}

void CheckpointSave::copy_to_host(std::vector<at::Tensor>& buffers) {
  try {
    buffers.resize(std::max(buffers.size(), units_.size()));
    for (size_t i = 0; i < units_.size(); ++i) {
      const at::Tensor& src = units_[i].shard;
      at::Tensor& dst = buffers[i];
      if (!dst.defined() || dst.numel() != src.numel() || dst.scalar_type() != src.scalar_type())
        dst = host_buffer(src);
      dst.copy_(src.reshape({-1}));
      units_[i].shard = dst;
    }
  } catch (...) {
    failure_ = std::current_exception();
  }
}

bool CheckpointSave::copies_to_host() const {
  for (const FullUnit& u : units_)
    if (!u.shard.device().is_cpu()) return true;
  return false;
}

void CheckpointSave::write(const std::function<void()>& released) {
  bool said = false;
  auto release = [&] {
    if (released && !std::exchange(said, true)) released();
  };
  if (failure_) {  // the copy failed
    release();
    return;
  }
  try {
    if (writer_ && consolidated_ && !gather_) {
      records_ = crc_parts_text(write_full_pieces(tmp_dir_ + "/model.h5", units_, offsets_));
    } else if (writer_ && consolidated_) {
      std::string failure;
      const std::vector<ManifestSlice> written = write_full_file(
          model_, optimizer_, adapters_only_, *groups_.shard, world_rank_ == 0, tmp_dir_ + "/model.h5", "model.h5",
          failure);
      ST_CHECK(failure.empty(), ErrorKind::kIo, "{}", failure);
      records_ = slices_text(written);
    } else if (writer_) {
      const std::string file_name = fmt::format("rank-{:05d}.h5", world_rank_);
      records_ = slices_text(write_rank_file(units_, tmp_dir_ + "/" + file_name, file_name, release));
    }
    release();
    common::kill_point("files-written", manifest_.step, world_rank_);
  } catch (...) {
    release();
    failure_ = std::current_exception();
  }
}

std::string CheckpointSave::commit(Pruner* pruner) {
  dist::Communicator& world = *groups_.world;
  const int64_t step = manifest_.step;
  dist::act_on_all(world, fmt::format("checkpoint at step {} failed; nothing was committed", step), [&] {
    if (failure_) std::rethrow_exception(failure_);
    // What a failed group carried (a gather of a full checkpoint, the step before) is not trusted.
    const std::string failed = dist::groups_failure(groups_);
    ST_CHECK(failed.empty(), ErrorKind::kPeerLost, "{}", failed);
  });
  const std::vector<std::string> all = dist::gather_text(world, records_);
  dist::decide_on_root(world, [&] {
    try {
      Manifest m = manifest_;
      if (consolidated_ && !gather_) {
        std::vector<CrcPart> parts;
        for (const std::string& r : all)
          for (const CrcPart& part : parse_crc_parts_text(r)) parts.push_back(part);
        m.slices = full_slices(units_, "model.h5", std::move(parts));
      } else {
        for (const std::string& r : all)
          if (!r.empty())
            for (ManifestSlice& s : parse_slices_text(r)) m.slices.push_back(std::move(s));
      }
      if (pruner != nullptr) pruner->wait();
      const PendingCheckpoint::Committed done = pending_->commit(m, pruner != nullptr ? 0 : keep_last_);
      if (pruner != nullptr)
        pruner->start(root_, keep_last_, step_dir_name(manifest_.step), pending_->started_ns());
      for (const std::string& w : done.warnings) spdlog::warn("checkpoint {} is committed, but {}", done.dir, w);
      for (const std::string& a : done.set_aside) spdlog::warn("set aside {}; kept, never resumed", a);
    } catch (const std::exception& e) {
      common::raise(ErrorKind::kIo, fmt::format("checkpoint at step {} could not be committed: {}", step, e.what()));
    }
    return std::string();
  }, fmt::format("committing checkpoint step {}", step));
  return dir();
}

}  // namespace shardtune::checkpoint
