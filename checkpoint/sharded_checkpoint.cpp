// Checkpoints of FSDP training: writing every rank's slices, committing, and loading at any world size.
#include "checkpoint/sharded_checkpoint.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <optional>

#include "checkpoint/checkpoint_reader.h"
#include "checkpoint/checkpoint_save.h"
#include "checkpoint/h5_check.h"
#include "checkpoint/h5_dataset.h"
#include "checkpoint/h5_handle.h"
#include "checkpoint/h5_range.h"
#include "checkpoint/manifest.h"
#include "checkpoint/saved_state.h"
#include "checkpoint/tensor_io.h"
#include "common/aligned_vector.h"
#include "common/lru_cache.h"
#include "common/open_files.h"
#include "common/read_ahead.h"
#include "common/error.h"
#include "runtime/dist/agree.h"
#include "runtime/dist/busy.h"
#include "runtime/fsdp/adafactor.h"
#include "runtime/fsdp/adamw.h"
#include "runtime/fsdp/replica_parts.h"
#include "runtime/model/lora.h"

namespace shardtune::checkpoint {
namespace {

namespace fs = std::filesystem;
using common::ErrorKind;

}  // namespace

VerifyReport verify_sharded_checkpoint(const std::string& dir, const std::function<void(int64_t bytes)>& on_read) {
  constexpr int64_t kVerifyPiece = int64_t(8) << 20;  // elements
  const Manifest manifest = read_manifest(dir);
  VerifyReport report;
  H5Handle fapl = unlocked_file_access();
  common::LruCache<std::string, H5Handle> files(common::open_file_share());  // open on demand
  // Every slice stored as shardtune writes it is read ahead, in order (common/read_ahead.h); the
  // rest, and every slice whose file or dataset is missing, is left to the loop below.
  std::vector<size_t> range_of(manifest.slices.size(), CheckpointReader::kNoRange);
  std::vector<common::ReadAhead::Range> ranges;
  for (size_t i = 0; i < manifest.slices.size(); ++i) {
    const ManifestSlice& s = manifest.slices[i];
    try {
      const std::string path = dir + "/" + s.file;
      if (!fs::exists(path)) continue;
      const H5Handle ds = open_checked_dataset(files.get(s.file, [&] { return open_checkpoint_file(path, fapl.get()); }).get(), s.kind, s.dataset);
      if (const std::optional<int64_t> at = raw_float32_offset(ds.get(), s.dataset_offset, s.length)) {
        range_of[i] = ranges.size();
        ranges.push_back({path, *at, s.length * static_cast<int64_t>(sizeof(float))});
      }
    } catch (const std::exception&) {  // reported by the loop below
    }
  }
  take_hdf5_error_stack();
  std::optional<common::ReadAhead> ahead;
  if (!ranges.empty()) ahead.emplace(std::move(ranges));
  common::AlignedVector<float> buffer;
  for (size_t i = 0; i < manifest.slices.size(); ++i) {
    const ManifestSlice& s = manifest.slices[i];
    const std::string where = fmt::format("{}/{}: {} of {} (elements {}..{})", dir, s.file, s.kind, s.tensor, s.offset,
                                          s.offset + s.length);
    try {
      const std::string path = dir + "/" + s.file;
      ST_CHECK(fs::exists(path), ErrorKind::kIo, "file missing");
      H5Handle ds = open_checked_dataset(files.get(s.file, [&] { return open_checkpoint_file(path, fapl.get()); }).get(), s.kind, s.dataset);
      const int64_t stored = dataset_numel(ds.get());
      ST_CHECK(stored >= s.dataset_offset + s.length, ErrorKind::kIo,
               "the dataset has {} elements, too few for elements {}..{} of it", stored, s.dataset_offset,
               s.dataset_offset + s.length);
      BlockCrc crc(s.block);  // read in bounded pieces: memory stays small whatever the slice
      for (int64_t at = 0, n; at < s.length; at += n) {
        n = std::min(kVerifyPiece, s.length - at);
        const common::ReadAhead::Piece piece =
            range_of[i] == CheckpointReader::kNoRange ? common::ReadAhead::Piece{}
                                                      : ahead->next(range_of[i], static_cast<size_t>(n) * sizeof(float));
        const float* data = reinterpret_cast<const float*>(piece.data);
        if (piece.bytes > 0) {
          n = static_cast<int64_t>(piece.bytes / sizeof(float));
        } else {
          buffer.resize(static_cast<size_t>(n));
          read_flat_range(ds.get(), s.dataset_offset + at, n, buffer.data());
          data = buffer.data();
        }
        crc.add(data, n);
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

std::string save_checkpoint(fsdp::FsdpLlama& model, fsdp::Optimizer* optimizer, const TrainingState& state,
                            dist::ProcessGroups& groups, const SaveRequest& request) {
  CheckpointSave save(model, optimizer, state, groups, request);
  // Writing alone (no gather), a rank may take longer than the collective timeout (a slow file
  // system): it says it is busy meanwhile, so that the ranks already in the commit wait for it.
  if (save.writes_alone())
    dist::while_busy(fmt::format("writing its files of checkpoint step {}", state.step), [&] { save.write(); });
  else
    save.write();
  return save.commit();
}

namespace {

// Whether a checkpoint holds the optimizer state of a flat parameter's tensors: all of them or none
// (tensors frozen when it was saved have none; anything between is damage), and their own step.
struct MomentsOf {
  bool saved = false;
  bool first_moment = false;        // Adafactor: the saved tensors have exp_avg
  std::optional<int64_t> step;      // the manifest's moment_steps entry, when the tensors have one
  std::vector<std::string> names;   // the flat parameter's tensors
};

// Whether the checkpoint holds AdamW's state of tensor `p`: both moments, and an 8-bit one's scales.
bool adamw_state_of(const CheckpointReader& reader, const fsdp::ParamSpan& p) {
  const bool avg = reader.has("exp_avg", p.name), sq = reader.has("exp_avg_sq", p.name);
  ST_CHECK(avg == sq, ErrorKind::kIo, "{} holds {} of {} but not {}", reader.dir(), avg ? "exp_avg" : "exp_avg_sq",
           p.name, avg ? "exp_avg_sq" : "exp_avg");
  if (reader.manifest().state_block > 0)
    for (const char* scales : kScaleKinds)
      ST_CHECK(reader.has(scales, p.name) == avg, ErrorKind::kIo, "{} holds {} of {} {} its moments", reader.dir(),
               scales, p.name, avg ? "without" : "but not");
  return avg;
}

// Whether the checkpoint holds Adafactor's statistics of tensor `p` (a matrix's row and column
// means, a vector's second moment).
bool adafactor_state_of(const CheckpointReader& reader, const fsdp::ParamSpan& p) {
  const bool row = reader.has(kFactorKinds[0], p.name), col = reader.has(kFactorKinds[1], p.name);
  const bool sq = reader.has("exp_avg_sq", p.name);
  const bool matrix = p.shape.size() == 2;
  ST_CHECK(matrix ? row == col && !sq : !row && !col, ErrorKind::kIo,
           "{} holds Adafactor statistics of {} ({}{}{}) that a tensor of {} dimensions does not have: damaged",
           reader.dir(), p.name, row ? "row means " : "", col ? "column means " : "", sq ? "second moments" : "",
           p.shape.size());
  return matrix ? row : sq;
}

MomentsOf moments_of(const CheckpointReader& reader, const fsdp::FlatParam& f) {
  MomentsOf out;
  const bool adafactor = reader.manifest().optimizer == "adafactor";
  size_t with = 0, first = 0;
  for (const fsdp::ParamSpan& p : f.layout().params()) {
    out.names.push_back(p.name);
    const bool saved = adafactor ? adafactor_state_of(reader, p) : adamw_state_of(reader, p);
    with += saved ? 1 : 0;
    first += saved && adafactor && reader.has("exp_avg", p.name) ? 1 : 0;
    if (auto it = reader.manifest().moment_steps.find(p.name); it != reader.manifest().moment_steps.end())
      out.step = it->second;
  }
  ST_CHECK(with == 0 || with == out.names.size(), ErrorKind::kIo,
           "{} holds optimizer moments of {} of the {} tensors that train together with {}: damaged", reader.dir(), with,
           out.names.size(), out.names.front());
  ST_CHECK(first == 0 || first == with, ErrorKind::kIo,
           "{} holds Adafactor's first moment of {} of the {} tensors that train together with {}: damaged",
           reader.dir(), first, with, out.names.front());
  out.saved = with > 0;
  out.first_moment = first > 0;
  return out;
}

// Adafactor resumes its first moment only where the checkpoint has one, and drops none.
void check_first_moment(const fsdp::Optimizer& optimizer, const MomentsOf& moments, const std::string& dir) {
  const auto* adafactor = dynamic_cast<const fsdp::Adafactor*>(&optimizer);
  if (adafactor == nullptr || !moments.saved) return;
  const bool wanted = adafactor->config().beta1 > 0;
  ST_CHECK(moments.first_moment == wanted, ErrorKind::kConfig,
           "{} holds Adafactor's state {} a first moment (of {} and the tensors with it), and this job's "
           "adafactor_beta1 = {} {} one: set adafactor_beta1 {} to resume it",
           dir, moments.first_moment ? "with" : "without", moments.names.front(), adafactor->config().beta1,
           wanted ? "needs" : "has no place for", moments.first_moment ? "above 0 (as saved)" : "= 0");
}

// An 8-bit AdamW's moments of trainable flat `index`, read decoded, to encode.
struct PendingCodes {
  size_t index;
  fsdp::FlatParam* flat;
  at::Tensor exp_avg, exp_avg_sq;
};

void encode_codes(fsdp::AdamW& optimizer, const PendingCodes& p, const std::string& dir) {
  const std::optional<int64_t> bad = optimizer.encode_moments(p.index, p.exp_avg, p.exp_avg_sq);
  if (!bad) return;
  for (const fsdp::ShardPiece& piece : p.flat->layout().pieces_in_shard(p.flat->shard_rank()))
    if (*bad >= piece.shard_offset && *bad < piece.shard_offset + piece.length)
      common::raise(ErrorKind::kIo, fmt::format("{}: the 8-bit AdamW moments of {} at element {} are not a code times "
                                                "their block's scale: damaged",
                                                dir, p.flat->layout().params()[piece.param].name,
                                                piece.param_offset + (*bad - piece.shard_offset)));
  common::raise(ErrorKind::kIo, fmt::format("{}: 8-bit AdamW moments that are not a code times a scale", dir));
}

// The checkpoint holds this model's tensors (or its adapters), with their shapes; throws
// common::Error(kConfig) naming every difference.
void check_fits(fsdp::FsdpLlama& model, const Manifest& manifest, const std::string& dir) {
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
}

// The checkpoint's optimizer state is this optimizer's; throws common::Error(kConfig) naming both.
void check_optimizer(const fsdp::Optimizer& optimizer, const Manifest& manifest, const std::string& dir) {
  const std::string wanted = optimizer.name();
  ST_CHECK(manifest.optimizer == wanted, ErrorKind::kConfig,
           "{} holds the state of optimizer \"{}\", and this job's [train] optimizer is \"{}\": set [train] "
           "optimizer = \"{}\" to resume it",
           dir, manifest.optimizer, wanted, manifest.optimizer);
  ST_CHECK(manifest.state_block == optimizer_state_block(optimizer), ErrorKind::kConfig,
           "{} holds {} state in blocks of {}; this build's are of {}", dir, manifest.optimizer, manifest.state_block,
           optimizer_state_block(optimizer));
}

// This rank's part of a load: no collectives, so that a rank that fails cannot leave the others
// waiting (load_sharded_checkpoint agrees on the outcome).
// Replicas (ranks holding the same shard) each read a part of it, replica_part, into `read`'s
// tensors: load_sharded_checkpoint shares the parts.
TrainingState load_shards_of(fsdp::FsdpLlama& model, fsdp::Optimizer* optimizer, const std::string& dir,
                             std::vector<at::Tensor>& read, std::vector<PendingCodes>& encodes) {
  const int replicas = model.groups().replicate->size(), replica = model.groups().replicate->rank();
  CheckpointReader reader(dir);
  const Manifest& manifest = reader.manifest();
  check_fits(model, manifest, dir);
  const bool adapters_only = manifest.adapter.has_value();
  const bool load_optimizer = optimizer != nullptr && manifest.has_optimizer;
  if (load_optimizer) check_optimizer(*optimizer, manifest, dir);
  TrainingState state;
  if (load_optimizer) optimizer->set_step_count(manifest.optimizer_step);
  size_t trainable_index = 0;
  for (fsdp::FlatParam* f : saved_flats(model, adapters_only)) {
    const size_t index = trainable_index;
    auto targets = state_of(f, load_optimizer ? optimizer : nullptr, trainable_index, /*for_load=*/true);
    if (load_optimizer && targets.size() > 1) {
      const MomentsOf moments = moments_of(reader, *f);
      check_first_moment(*optimizer, moments, dir);
      if (!moments.saved) state.fresh_moments.insert(state.fresh_moments.end(), moments.names.begin(), moments.names.end());
      optimizer->set_param_step(index, !moments.saved ? 0 : moments.step.value_or(manifest.optimizer_step));
      if (!moments.saved) {  // they start fresh
        for (size_t k = 1; k < targets.size(); ++k) targets[k].tensor.zero_();
        targets.resize(1);
      }
    } else if (load_optimizer && !f->trainable() && moments_of(reader, *f).saved) {
      for (const fsdp::ParamSpan& p : f->layout().params()) state.unused_moments.push_back(p.name);
    }
    for (FlatState& target : targets) {
      const fsdp::ShardPart part = fsdp::replica_part(target.tensor.numel(), replicas, replica);
      if (replicas > 1) read.push_back(target.tensor);  // parts to share
      for (const fsdp::ShardPiece& piece : target.layout->pieces_in_part(target.shard_of(*f), part)) {
        const fsdp::ParamSpan& p = target.layout->params()[piece.param];
        read_tensor(target.tensor.narrow(0, piece.shard_offset, piece.length),
                    [&](int64_t offset, int64_t count, float* out) {
                      reader.read_range(target.kind, p.name, piece.param_offset + offset, count, out);
                    });
      }
    }
    // An 8-bit AdamW's moments, read decoded, become codes again: here, a flat parameter at a time
    // (its decoded copies freed before the next is read), or, where replicas read parts of them,
    // once every replica has them all.
    if (targets.size() > 3 && optimizer->name() == "adamw_8bit") {
      PendingCodes pending{index, f, targets[1].tensor, targets[2].tensor};
      if (replicas == 1)
        encode_codes(dynamic_cast<fsdp::AdamW&>(*optimizer), pending, dir);
      else
        encodes.push_back(std::move(pending));
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
  state.data = manifest.data;
  state.has_optimizer = manifest.has_optimizer;
  return state;
}

}  // namespace

TrainingState load_sharded_checkpoint(fsdp::FsdpLlama& model, fsdp::Optimizer* optimizer, const std::string& dir,
                                      dist::Communicator& world) {
  TrainingState state;
  std::vector<at::Tensor> read;
  std::vector<PendingCodes> encodes;
  dist::act_on_all(world, fmt::format("loading checkpoint {}", dir),
                   [&] { state = load_shards_of(model, optimizer, dir, read, encodes); });
  // Each replica read a part of its shards: every rank of a replicate group gets the others'.
  for (at::Tensor& t : read) fsdp::share_parts(t, *model.groups().replicate);
  read.clear();
  if (!encodes.empty())
    dist::act_on_all(world, fmt::format("loading the 8-bit optimizer state of checkpoint {}", dir), [&] {
      for (PendingCodes& p : encodes) {
        encode_codes(dynamic_cast<fsdp::AdamW&>(*optimizer), p, dir);
        p = PendingCodes{};  // its decoded moments freed as it goes
      }
    });
  if (model.groups().replicate->size() > 1)
    for (fsdp::FlatParam* f : model.flat_params()) f->reshard();
  return state;
}

}  // namespace shardtune::checkpoint
