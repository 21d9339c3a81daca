// Checkpoint conversions, streaming: every tensor moves in pieces of at most kPiece elements.
#include "tools/ckpt_convert.h"

#include <ATen/ops/from_blob.h>
#include <fmt/format.h>
#include <fcntl.h>
#include <fmt/ranges.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <map>
#include <optional>
#include <span>
#include <utility>
#include <nlohmann/json.hpp>

#include "checkpoint/checkpoint_reader.h"
#include "checkpoint/adapter_base.h"
#include "checkpoint/block_crc.h"
#include "checkpoint/h5_check.h"
#include "checkpoint/h5_handle.h"
#include "checkpoint/h5_range.h"
#include "checkpoint/hf/hf_tensor_source.h"
#include "checkpoint/hf/hf_folder.h"
#include "checkpoint/hf/hf_model_io.h"
#include "checkpoint/hf/safetensors_stream_writer.h"
#include "checkpoint/hf/safetensors_torch.h"
#include "checkpoint/commit.h"
#include "checkpoint/full_file.h"
#include "checkpoint/manifest.h"
#include "common/aligned_vector.h"
#include "common/atomic_file.h"
#include "common/lru_cache.h"
#include "common/open_files.h"
#include "common/read_ahead.h"
#include "common/error.h"
#include "common/file_io.h"
#include "common/job/job_loader.h"
#include "common/pending_folder.h"
#include "common/process_memory.h"
#include "common/direct_file.h"
#include "common/write_behind.h"
#include "runtime/fsdp/adafactor.h"
#include "runtime/fsdp/llama_units.h"
#include "runtime/fsdp/shard_layout.h"
#include "runtime/fsdp/shard_loader.h"
#include "runtime/model/llama.h"
#include "runtime/model/lora.h"
#include "tools/tool_progress.h"

namespace shardtune::tools {
namespace {

namespace fs = std::filesystem;
using common::ErrorKind;
using nlohmann::json;
using checkpoint::H5Handle;

// Tensors move through the tools in pieces of at most this many elements (32 MiB of float32),
// so no command holds a whole tensor.
constexpr int64_t kPiece = int64_t(8) << 20;

int64_t numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

// A full checkpoint written tensor by tensor: model.h5 (every dataset laid out first, then written
// behind the reads) and a manifest, committed as the training writes its checkpoints
// (checkpoint/commit.h).
class FullWriter {
 public:
  // `datasets`: every tensor to come.
  FullWriter(const std::string& out, checkpoint::Manifest manifest, const std::vector<checkpoint::DatasetSpec>& datasets)
      : pending_(out), manifest_(std::move(manifest)), file_(laid_out(pending_.dir() + "/model.h5", datasets)) {
    manifest_.slices.clear();
    manifest_.layout = "full";
  }
  // A tensor in pieces: begin, then its elements in order, then end.
  void begin(const std::string& kind, const std::string& name) {
    const auto it = offsets_.find({kind, name});
    ST_CHECK(it != offsets_.end(), ErrorKind::kInternal, "{}/{} was not laid out in {}", kind, name, file_.path());
    offset_ = it->second;
    kind_ = kind;
    name_ = name;
    written_ = 0;
  }
  void append(const float* data, int64_t count) {
    crc_.add(data, count);
    file_.write(data, static_cast<size_t>(count) * 4, offset_ + written_ * 4);
    written_ += count;
  }
  void end() {
    manifest_.slices.push_back({kind_, name_, "model.h5", name_, 0, written_, checkpoint::kCrcBlock, crc_.finish()});
  }
  void commit() {
    file_.finish();
    pending_.commit(manifest_);
  }

 private:
  std::string laid_out(const std::string& path, const std::vector<checkpoint::DatasetSpec>& datasets) {
    const std::vector<int64_t> offsets =
        checkpoint::create_contiguous_file(path, {}, datasets, static_cast<int64_t>(common::kDirectAlignment));
    for (size_t i = 0; i < datasets.size(); ++i) offsets_[{datasets[i].group, datasets[i].name}] = offsets[i];
    return path;
  }

  checkpoint::PendingDirectory pending_;
  checkpoint::Manifest manifest_;
  std::map<std::pair<std::string, std::string>, int64_t> offsets_;
  common::DirectWriter file_;
  std::string kind_, name_;
  int64_t offset_ = 0, written_ = 0;
  checkpoint::BlockCrc crc_;
};

}  // namespace

void consolidate(const std::string& src, const std::string& out) {
  checkpoint::CheckpointReader reader(src);
  uint64_t total = 0;
  std::vector<checkpoint::DatasetSpec> datasets;
  for (const std::string& name : reader.tensor_names())
    for (const char* kind : checkpoint::kStateKinds)
      if (reader.has(kind, name)) {
        const checkpoint::ManifestTensor t{reader.shape(name), "F32"};
        const int64_t n = checkpoint::kind_numel(kind, t, reader.manifest().state_block);
        total += static_cast<uint64_t>(n) * 4;
        datasets.push_back({kind, name, checkpoint::kind_shape(kind, t, reader.manifest().state_block)});
      }
  FullWriter writer(out, reader.manifest(), datasets);
  common::Progress progress(tool_progress("consolidating", static_cast<int64_t>(total)));
  std::vector<std::pair<std::string, std::string>> order;
  for (const checkpoint::DatasetSpec& d : datasets) order.emplace_back(d.group, d.name);
  reader.read_ahead(order);
  for (const auto& [kind, name] : order) {
    writer.begin(kind, name);
    checkpoint::CheckpointReader::Stream stream = reader.stream(kind, name);
    for (std::span<const float> got; !(got = stream.next(kPiece)).empty();) {
      writer.append(got.data(), static_cast<int64_t>(got.size()));
      progress.add(static_cast<int64_t>(got.size()) * 4);
    }
    writer.end();
  }
  writer.commit();
  progress.finish("consolidated", peak_memory_note());
}

namespace {

// One rank's piece of a tensor in a reshard: where it goes, and its checksum as it streams by.
struct ReshardOut {
  int rank;
  int64_t offset, length;
  std::string dataset;
  size_t spec;          // its dataset among its rank file's
  int64_t at_byte = 0;  // where its bytes go in that file
  checkpoint::BlockCrc crc;
};

struct ReshardTensor {
  std::string kind;
  const fsdp::ParamSpan* param;
  std::vector<ReshardOut> outs;  // in rank order, which is element order
};

// The flat layouts of a checkpoint's model at `world_size` (an adapter checkpoint: the adapters of
// each unit, as a LoRA job's trainable flat parameters).
std::vector<fsdp::FlatLayout> reshard_layouts(const checkpoint::Manifest& manifest, const std::string& src,
                                              int world_size) {
  ST_CHECK(!manifest.model_config.is_null(), ErrorKind::kConfig,
           "{} records no model config.json: its FSDP units cannot be laid out", src);
  model::LlamaForCausalLM skeleton(model::LlamaConfig::from_json(manifest.model_config, src + "/manifest.json"),
                                   at::TensorOptions().device(at::kMeta));
  if (manifest.adapter)
    model::add_lora(skeleton, {manifest.adapter->r, manifest.adapter->alpha, 0.0, manifest.adapter->target_modules}, 0);
  std::vector<fsdp::FlatLayout> layouts;
  for (const auto& unit : fsdp::llama_units(skeleton)) {
    std::vector<fsdp::FlatLayout::Entry> entries;
    for (const model::NamedParam& p : unit)
      if (!manifest.adapter || model::is_adapter_parameter(p.name)) entries.push_back({p.name, p.tensor->sizes().vec()});
    // Aligned as the 8-bit optimizer's training lays them out, so that its scales' blocks fall
    // in one shard each.
    if (!entries.empty()) layouts.emplace_back(entries, world_size, std::max<int64_t>(manifest.state_block, 1));
  }
  return layouts;
}

// How each kind lies at the reshard's world size: as the flat parameters (parameters, moments), as
// their blocks (8-bit AdamW's scales, FlatLayout::blocks), or as Adafactor's row and column means
// of each (fsdp::statistics_layout).
struct KindLayouts {
  std::vector<fsdp::FlatLayout> flats, blocks, rows, cols;

  KindLayouts(std::vector<fsdp::FlatLayout> layouts, int64_t state_block, int world_size) : flats(std::move(layouts)) {
    for (const fsdp::FlatLayout& layout : flats) {
      if (state_block > 0) blocks.push_back(layout.blocks(state_block));
      rows.push_back(fsdp::statistics_layout(layout, fsdp::kRowMeans, world_size));
      cols.push_back(fsdp::statistics_layout(layout, fsdp::kColumnMeans, world_size));
    }
  }
  const std::vector<fsdp::FlatLayout>& of(const std::string& kind) const {
    if (checkpoint::is_scale_kind(kind)) return blocks;
    if (kind == checkpoint::kFactorKinds[0]) return rows;
    if (kind == checkpoint::kFactorKinds[1]) return cols;
    return flats;
  }
};

// Each stored tensor's pieces by rank, and each rank file's datasets (`specs`), kind by kind.
std::vector<ReshardTensor> reshard_pieces(const checkpoint::CheckpointReader& reader, const KindLayouts& layouts,
                                          const std::vector<std::string>& kinds, int world_size,
                                          std::vector<std::vector<checkpoint::DatasetSpec>>& specs) {
  std::vector<ReshardTensor> tensors;
  specs.assign(static_cast<size_t>(world_size), {});
  for (const std::string& kind : kinds)
    for (const fsdp::FlatLayout& layout : layouts.of(kind)) {
      std::vector<std::vector<fsdp::ShardPiece>> by_rank;
      for (int r = 0; r < world_size; ++r) by_rank.push_back(layout.pieces_in_shard(r));
      for (size_t param = 0; param < layout.params().size(); ++param) {
        const fsdp::ParamSpan& p = layout.params()[param];
        if (!reader.has(kind, p.name)) continue;
        ReshardTensor t{kind, &p, {}};
        for (int r = 0; r < world_size; ++r)
          for (const fsdp::ShardPiece& sp : by_rank[static_cast<size_t>(r)]) {
            if (sp.param != param) continue;
            auto& mine = specs[static_cast<size_t>(r)];
            t.outs.push_back({r, sp.param_offset, sp.length, fmt::format("{}@{}", p.name, sp.param_offset), mine.size(), 0, {}});
            mine.push_back({kind, t.outs.back().dataset, {sp.length}});
          }
        tensors.push_back(std::move(t));
      }
    }
  return tensors;
}

// Each tensor read once, front to back, its pieces written behind the reads into their ranks'
// files (laid out at `paths` already) as it streams by; the slices that describe them.
std::vector<checkpoint::ManifestSlice> stream_pieces(checkpoint::CheckpointReader& reader,
                                                     std::vector<ReshardTensor>& tensors,
                                                     const std::vector<std::string>& names,
                                                     const std::vector<std::string>& paths, common::Progress& progress) {
  // One set of aligned buffers for every file (common/direct_file.h): memory stays bounded.
  // Rank files are opened as the stream reaches them and closed (unsynced) beyond a share of the
  // open-file limit (common/open_files.h), then each synced once at the end.
  common::WriteBehind writes(common::kDirectBuffers, common::kDirectBufferBytes);
  common::LruCache<int, std::unique_ptr<common::DirectWriter>> files(  // after it: closed before it stops
      common::open_file_share(), [](std::unique_ptr<common::DirectWriter>& w) { w->close(); });
  auto file = [&](int r) -> common::DirectWriter& {
    return *files.get(r, [&] { return std::make_unique<common::DirectWriter>(paths[static_cast<size_t>(r)], &writes); });
  };
  std::vector<checkpoint::ManifestSlice> slices;
  std::vector<std::pair<std::string, std::string>> order;
  for (const ReshardTensor& t : tensors) order.emplace_back(t.kind, t.param->name);
  reader.read_ahead(order);
  for (ReshardTensor& t : tensors) {
    checkpoint::CheckpointReader::Stream stream = reader.stream(t.kind, t.param->name);
    int64_t at = 0;
    for (std::span<const float> got; !(got = stream.next(kPiece)).empty(); at += static_cast<int64_t>(got.size())) {
      const int64_t n = static_cast<int64_t>(got.size());
      for (ReshardOut& o : t.outs) {
        const int64_t lo = std::max(at, o.offset), hi = std::min(at + n, o.offset + o.length);
        if (lo >= hi) continue;
        const float* data = got.data() + (lo - at);
        o.crc.add(data, hi - lo);
        file(o.rank).write(data, static_cast<size_t>(hi - lo) * 4, o.at_byte + (lo - o.offset) * 4);
      }
      progress.add(n * 4);
    }
    for (ReshardOut& o : t.outs)
      slices.push_back({t.kind, t.param->name, names[static_cast<size_t>(o.rank)], o.dataset, o.offset, o.length,
                        checkpoint::kCrcBlock, o.crc.finish()});
  }
  files.clear();
  for (const std::string& path : paths) common::fsync_path(path, false);
  return slices;
}

}  // namespace

void reshard(const std::string& src, const std::string& out, int world_size) {
  ST_CHECK(world_size >= 1, ErrorKind::kUsage, "--world-size must be at least 1, got {}", world_size);
  checkpoint::CheckpointReader reader(src);
  checkpoint::Manifest manifest = reader.manifest();
  const KindLayouts layouts(reshard_layouts(manifest, src, world_size), manifest.state_block, world_size);
  checkpoint::PendingDirectory pending(out);
  const std::string tmp = pending.dir();
  // The state kinds of each tensor: frozen tensors (freeze_layers) have no optimizer moments while
  // the others do, so the kinds are looked up tensor by tensor.
  std::vector<std::string> kinds;
  uint64_t total = 0;
  for (const char* kind : checkpoint::kStateKinds)
    for (const fsdp::FlatLayout& layout : layouts.of(kind))
      for (const fsdp::ParamSpan& p : layout.params())
        if (reader.has(kind, p.name)) {
          if (kinds.empty() || kinds.back() != kind) kinds.emplace_back(kind);
          total += static_cast<uint64_t>(p.numel) * 4;
        }
  common::Progress progress(tool_progress("resharding", static_cast<int64_t>(total)));
  // Every rank's file laid out first (a dataset per piece), then the tensors streamed into them.
  std::vector<std::vector<checkpoint::DatasetSpec>> specs;
  std::vector<ReshardTensor> tensors = reshard_pieces(reader, layouts, kinds, world_size, specs);
  std::vector<std::string> names, paths;
  for (int r = 0; r < world_size; ++r) {
    names.push_back(fmt::format("rank-{:05d}.h5", r));
    paths.push_back(tmp + "/" + names.back());
    const std::vector<int64_t> offsets = checkpoint::create_contiguous_file(
        paths.back(), kinds, specs[static_cast<size_t>(r)], static_cast<int64_t>(common::kDirectAlignment));
    for (ReshardTensor& t : tensors)
      for (ReshardOut& o : t.outs)
        if (o.rank == r) o.at_byte = offsets[o.spec];
  }
  manifest.slices = stream_pieces(reader, tensors, names, paths, progress);
  manifest.layout = "sharded";
  manifest.world_size = world_size;
  manifest.shard_group_size = world_size;
  pending.commit(manifest);
  progress.finish("resharded", peak_memory_note());
}

namespace {

struct ExportDtype {
  common::Dtype dtype;
  const char* name;        // as --dtype spells it
  const char* torch_name;  // as config.json spells it
  std::string why;
};

ExportDtype dtype_named(const std::string& name, std::string why) {
  if (name == "bf16") return {common::Dtype::kBF16, "bf16", "bfloat16", std::move(why)};
  if (name == "fp16") return {common::Dtype::kF16, "fp16", "float16", std::move(why)};
  return {common::Dtype::kF32, "fp32", "float32", std::move(why)};
}

// --dtype, or by default the narrowest dtype that holds the checkpoint's weights exactly: bf16
// when they are bf16 values (trained with pure_bf16, or imported from a bf16 folder), else fp32
// (the master weights of mixed precision, which bf16 would round).
ExportDtype export_dtype(const checkpoint::Manifest& manifest, const model::LlamaConfig& cfg, const std::string& asked) {
  if (asked != "auto") return dtype_named(asked, "as --dtype asks");
  if (manifest.job_toml.empty()) {  // imported: the weights are the folder's
    if (cfg.torch_dtype == "bfloat16") return dtype_named("bf16", "the dtype of the folder it was imported from");
    if (cfg.torch_dtype == "float16") return dtype_named("fp16", "the dtype of the folder it was imported from");
    return dtype_named("fp32", "its weights as stored (--dtype bf16 halves the folder, rounding them)");
  }
  const job::LoadedJob job = job::parse_job(manifest.job_toml, "the job recorded in the manifest");
  if (!job.diagnostics.has_errors() && job.job.train.pure_bf16)
    return dtype_named("bf16", "the job trained bf16 weights (pure_bf16), which bf16 holds exactly");
  return dtype_named("fp32", "its weights are fp32 master weights (--dtype bf16 halves the folder, rounding them)");
}

}  // namespace

void export_hf(const std::string& src, const std::string& out, const std::string& dtype, uint64_t max_shard_bytes,
               const std::string& tokenizer_dir) {
  checkpoint::CheckpointReader reader(src);
  ST_CHECK(!reader.manifest().adapter, ErrorKind::kConfig,
           "{} holds LoRA adapters, not a whole model: export-peft writes them as a PEFT adapter folder, and "
           "merge-lora {} BASE OUT writes the base model with them merged in",
           src, src);
  ST_CHECK(!reader.manifest().model_config.is_null(), ErrorKind::kConfig,
           "{} records no model config.json, so it cannot become a Hugging Face folder", src);
  json config = reader.manifest().model_config;
  const model::LlamaConfig cfg = model::LlamaConfig::from_json(config, src + "/manifest.json model_config");
  const ExportDtype chosen = export_dtype(reader.manifest(), cfg, dtype);
  fmt::print(stderr, "exporting as {}: {}\n", chosen.name, chosen.why);
  const common::Dtype st = chosen.dtype;
  config["torch_dtype"] = chosen.torch_name;
  if (config.contains("dtype")) config["dtype"] = chosen.torch_name;  // transformers 5's spelling
  // Shards in Hugging Face's parameter order, each at most max_shard_bytes (a larger tensor alone).
  model::LlamaForCausalLM skeleton(cfg, at::TensorOptions().device(at::kMeta));
  std::vector<std::vector<checkpoint::StreamedTensor>> shards(1);
  uint64_t in_shard = 0, total = 0;
  for (const model::NamedParam& p : skeleton.named_parameters()) {
    const std::vector<int64_t> shape(p.tensor->sizes().begin(), p.tensor->sizes().end());
    ST_CHECK(reader.has("param", p.name), ErrorKind::kConfig, "{} lacks tensor {}", src, p.name);
    const uint64_t bytes = static_cast<uint64_t>(numel(shape)) * common::element_size(st);
    if (in_shard > 0 && in_shard + bytes > max_shard_bytes) {
      shards.emplace_back();
      in_shard = 0;
    }
    shards.back().push_back({p.name, st, shape});
    in_shard += bytes;
    total += bytes;
  }
  common::PendingFolder pending(out);  // OUT appears whole, or not at all
  const std::string dir = pending.path();
  common::Progress progress(tool_progress("exporting", static_cast<int64_t>(total)));
  std::vector<std::pair<std::string, std::string>> order;
  for (const auto& shard : shards)
    for (const checkpoint::StreamedTensor& t : shard) order.emplace_back(checkpoint::kParamKind, t.name);
  reader.read_ahead(order);
  json weight_map = json::object();
  for (size_t i = 0; i < shards.size(); ++i) {
    const std::string name = shards.size() == 1 ? std::string(checkpoint::kSafeWeightsName)
                                                : fmt::format("model-{:05d}-of-{:05d}.safetensors", i + 1, shards.size());
    checkpoint::SafetensorsStreamWriter writer(dir + "/" + name, shards[i], {{"format", "pt"}});
    for (const checkpoint::StreamedTensor& t : shards[i]) {
      checkpoint::CheckpointReader::Stream stream = reader.stream("param", t.name);
      for (std::span<const float> got; !(got = stream.next(kPiece)).empty();) {
        const auto n = static_cast<int64_t>(got.size());
        // Only read: from_blob asks for a pointer it could write through.
        writer.append_elements(at::from_blob(const_cast<float*>(got.data()), {n}, at::kFloat));
        progress.add(n * static_cast<int64_t>(common::element_size(st)));
      }
      weight_map[t.name] = name;
    }
    writer.finish();
  }
  if (shards.size() > 1)
    common::write_file_atomically(dir + "/" + checkpoint::kSafeWeightsIndexName,
                                  json{{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}}.dump(2));
  common::write_file_atomically(dir + "/config.json", config.dump(2));
  if (!tokenizer_dir.empty())
    for (const char* f : checkpoint::kTokenizerFileNames)
      if (fs::exists(fs::path(tokenizer_dir) / f)) fs::copy_file(fs::path(tokenizer_dir) / f, fs::path(dir) / f);
  pending.commit();
  progress.finish("exported", peak_memory_note());
}

void import_hf(const std::string& hf_dir, const std::string& out) {
  const checkpoint::HfFolder folder = checkpoint::HfFolder::open(hf_dir);
  const model::LlamaConfig cfg = model::LlamaConfig::from_json(folder.config(), hf_dir + "/config.json");
  checkpoint::Manifest manifest;  // step 0, no optimizer, as if saved by one rank
  manifest.model_config = cfg.to_json();
  model::LlamaForCausalLM skeleton(cfg, at::TensorOptions().device(at::kMeta));
  // What training would refuse, refused here too, before anything is written: missing, extra or
  // misshapen tensors, and integer or quantised ones (their raw values are not weights).
  const std::vector<std::string> ignored = checkpoint::check_hf_weights(skeleton, folder);
  if (!ignored.empty()) fmt::print(stderr, "{}: {}\n", hf_dir, fsdp::ignored_tensors_note(ignored));
  uint64_t total = 0;
  std::vector<checkpoint::DatasetSpec> datasets;
  for (const model::NamedParam& p : skeleton.named_parameters()) {
    manifest.tensors[p.name] = {p.tensor->sizes().vec(), "F32"};
    total += static_cast<uint64_t>(p.tensor->numel()) * 4;
    datasets.push_back({"param", p.name, p.tensor->sizes().vec()});
  }
  FullWriter writer(out, manifest, datasets);
  common::Progress progress(tool_progress("importing", static_cast<int64_t>(total)));
  // The folder's bytes read ahead in the order they are imported (common/read_ahead.h); a tensor
  // whose bytes start where its dtype's elements cannot is read through the source instead.
  std::vector<common::ReadAhead::Range> ranges;
  std::vector<std::optional<size_t>> range_of;
  for (const model::NamedParam& p : skeleton.named_parameters()) {
    const checkpoint::TensorInfo& info = folder.info(p.name);
    const bool aligned = info.data_begin % common::element_size(info.dtype) == 0;
    range_of.push_back(aligned ? std::optional<size_t>(ranges.size()) : std::nullopt);
    if (aligned)
      ranges.push_back({folder.file_of(p.name).path(), static_cast<int64_t>(info.data_begin), static_cast<int64_t>(info.nbytes)});
  }
  common::ReadAhead ahead(std::move(ranges));
  checkpoint::HfTensorSource source(hf_dir);
  common::AlignedVector<float> piece(static_cast<size_t>(kPiece));
  size_t index = 0;
  for (const model::NamedParam& p : skeleton.named_parameters()) {
    const checkpoint::TensorInfo& info = folder.info(p.name);
    const std::optional<size_t> range = range_of[index++];
    const at::ScalarType stored = checkpoint::to_scalar_type(info.dtype);
    const auto esize = static_cast<int64_t>(common::element_size(info.dtype));
    writer.begin("param", p.name);
    for (int64_t at = 0, n; at < p.tensor->numel(); at += n) {
      n = std::min(kPiece, p.tensor->numel() - at);
      const common::ReadAhead::Piece raw =
          range ? ahead.next(*range, static_cast<size_t>(n * esize)) : common::ReadAhead::Piece{};
      const float* data = piece.data();
      if (raw.bytes == 0) {
        source.read(p.name, at, n, at::kFloat, piece.data());
      } else if (stored == at::kFloat) {
        n = static_cast<int64_t>(raw.bytes) / esize;
        data = reinterpret_cast<const float*>(raw.data);
      } else {
        n = static_cast<int64_t>(raw.bytes) / esize;
        at::from_blob(piece.data(), {n}, at::kFloat)
            .copy_(at::from_blob(const_cast<char*>(raw.data), {n}, at::TensorOptions().dtype(stored)));
      }
      writer.append(data, n);
      progress.add(n * 4);
    }
    writer.end();
  }
  writer.commit();
  progress.finish("imported", peak_memory_note());
}

namespace {

// The largest absolute difference and absolute value of the second of two runs of elements, so far.
struct DiffSums {
  double abs_diff = 0, largest = 0;
  bool nan_mismatch = false;  // a NaN on one side only
};

void add_differences(std::span<const float> x, std::span<const float> y, DiffSums& sums) {
  double abs_diff = sums.abs_diff, largest = sums.largest;
  bool nan_mismatch = false;
  for (size_t i = 0; i < x.size(); ++i) {
    const double u = x[i], v = y[i];
    const double d = std::abs(u - v), m = std::abs(v);
    abs_diff = d > abs_diff ? d : abs_diff;  // a NaN compares false: NaNs on both sides are equal
    largest = m > largest ? m : largest;
    nan_mismatch |= std::isnan(u) != std::isnan(v);
  }
  sums = {abs_diff, largest, sums.nan_mismatch || nan_mismatch};
}

// Streams one (kind, tensor) of both checkpoints; prints its largest absolute and relative
// difference; true when they differ.
bool diff_tensor(checkpoint::CheckpointReader& ra, checkpoint::CheckpointReader& rb, const std::string& kind,
                 const std::string& name) {
  checkpoint::CheckpointReader::Stream sa = ra.stream(kind, name), sb = rb.stream(kind, name);
  DiffSums sums;
  // Both sides' pieces straight from their read-ahead buffers: x stays valid while b is read.
  for (std::span<const float> x; !(x = sa.next(kPiece)).empty();)
    for (size_t at = 0; at < x.size();) {
      const std::span<const float> y = sb.next(static_cast<int64_t>(x.size() - at));
      ST_CHECK(!y.empty(), ErrorKind::kInternal, "a checkpoint stream ended early");
      add_differences(x.subspan(at, y.size()), y, sums);
      at += y.size();
    }
  const double abs_diff = sums.nan_mismatch ? std::numeric_limits<double>::infinity() : sums.abs_diff;
  const double rel = abs_diff / std::max(sums.largest, 1e-30);
  const std::string label = kind == checkpoint::kParamKind ? name : kind + " " + name;
  fmt::print("{:<56} max abs {:.3e}  max rel {:.3e}\n", label, abs_diff, rel);
  return abs_diff != 0;
}

// The training state of two manifests, field by field: one line per difference.
int diff_state(const checkpoint::Manifest& a, const checkpoint::Manifest& b) {
  int differences = 0;
  auto field = [&](const char* key, const auto& x, const auto& y) {
    if (x == y) return;
    fmt::print("state {}: {} vs {}\n", key, x, y);
    ++differences;
  };
  field("step", a.step, b.step);
  field("epoch", a.epoch, b.epoch);
  field("sample_in_epoch", a.sample_in_epoch, b.sample_in_epoch);
  field("optimizer_step", a.optimizer_step, b.optimizer_step);
  field("has_optimizer", a.has_optimizer, b.has_optimizer);
  field("loss_scale", a.loss_scale, b.loss_scale);
  field("reference_batch", a.reference_batch, b.reference_batch);
  field("validation_pending", a.validation_pending, b.validation_pending);
  if (a.moment_steps != b.moment_steps) {
    fmt::print("state moment_steps: {} vs {}\n", json(a.moment_steps).dump(), json(b.moment_steps).dump());
    ++differences;
  }
  if (a.model_config != b.model_config) {
    std::vector<std::string> keys;
    for (const json* c : {&a.model_config, &b.model_config})
      if (c->is_object())
        for (const auto& [key, value] : c->items())
          if (std::find(keys.begin(), keys.end(), key) == keys.end() &&
              a.model_config.value(key, json()) != b.model_config.value(key, json()))
            keys.push_back(key);
    fmt::print("model config: {} differ\n", keys.empty() ? std::string("they") : fmt::format("{}", fmt::join(keys, ", ")));
    ++differences;
  }
  if (a.adapter.has_value() != b.adapter.has_value() ||
      (a.adapter && (a.adapter->r != b.adapter->r || a.adapter->alpha != b.adapter->alpha ||
                     a.adapter->target_modules != b.adapter->target_modules ||
                     checkpoint::base_mismatch(*a.adapter, *b.adapter)))) {
    fmt::print("adapter: {}\n", a.adapter.has_value() != b.adapter.has_value() ? "only one holds LoRA adapters"
                                                                               : "their LoRA settings or base models differ");
    ++differences;
  }
  return differences;
}

}  // namespace

bool diff(const std::string& a, const std::string& b, bool params_only) {
  const auto start = std::chrono::steady_clock::now();
  checkpoint::CheckpointReader ra(a), rb(b);
  int differences = params_only ? 0 : diff_state(ra.manifest(), rb.manifest());
  const std::vector<std::string> kinds =
      params_only ? std::vector<std::string>{checkpoint::kParamKind}
                  : std::vector<std::string>(std::begin(checkpoint::kStateKinds), std::end(checkpoint::kStateKinds));
  std::vector<std::pair<std::string, std::string>> order;  // the tensors compared below, in turn
  for (const std::string& kind : kinds)
    for (const std::string& name : ra.tensor_names())
      if (ra.has(kind, name) && rb.has(kind, name) && ra.shape(name) == rb.shape(name)) order.emplace_back(kind, name);
  ra.read_ahead(order);
  rb.read_ahead(order);
  for (const std::string& kind : kinds) {
    for (const std::string& name : ra.tensor_names()) {
      const bool in_a = ra.has(kind, name), in_b = rb.has(kind, name);
      const std::string label = kind == checkpoint::kParamKind ? name : kind + " " + name;
      if (!in_a && !in_b) continue;
      if (in_a != in_b) {
        fmt::print("{}: only in {}\n", label, in_a ? a : b);
        ++differences;
      } else if (ra.shape(name) != rb.shape(name)) {
        fmt::print("{}: shapes differ\n", label);
        ++differences;
      } else {
        differences += diff_tensor(ra, rb, kind, name) ? 1 : 0;
      }
    }
    for (const std::string& name : rb.tensor_names())
      if (rb.has(kind, name) && ra.manifest().tensors.count(name) == 0) {
        fmt::print("{}: only in {}\n", kind == checkpoint::kParamKind ? name : kind + " " + name, b);
        ++differences;
      }
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const double gb = static_cast<double>(ra.bytes_read() + rb.bytes_read()) / 1e9;
  fmt::print(stderr, "compared {}: {} difference(s); {:.2f} GB read in {:.1f} s ({:.2f} GB/s), peak memory {:.0f} MiB\n",
             params_only ? "the weights" : "the weights, optimizer state and training state", differences, gb,
             seconds, gb / std::max(seconds, 1e-9),
             static_cast<double>(common::peak_resident_bytes()) / (1 << 20));
  return differences > 0;
}

}  // namespace shardtune::tools
