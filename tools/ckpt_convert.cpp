// Checkpoint conversions, one tensor in memory at a time.
#include "tools/ckpt_convert.h"

#include <ATen/TensorOperators.h>
#include <ATen/ops/empty.h>
#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>

#include "checkpoint/checkpoint_reader.h"
#include "checkpoint/crc32.h"
#include "checkpoint/h5_check.h"
#include "checkpoint/h5_handle.h"
#include "checkpoint/hf_folder.h"
#include "checkpoint/safetensors_stream_writer.h"
#include "checkpoint/safetensors_torch.h"
#include "checkpoint/sharded_checkpoint.h"
#include "common/error.h"
#include "runtime/fsdp/llama_units.h"
#include "runtime/fsdp/shard_layout.h"
#include "runtime/model/llama.h"

namespace shardtune::tools {
namespace {

namespace fs = std::filesystem;
using common::ErrorKind;
using nlohmann::json;
using checkpoint::H5Handle;

// "1.20/3.40 GB, 0.85 GB/s, ETA 0:00:03" on stderr, at most twice a second.
class Progress {
 public:
  explicit Progress(uint64_t total) : total_(total), start_(std::chrono::steady_clock::now()) {}
  void add(uint64_t bytes) {
    done_ += bytes;
    const auto now = std::chrono::steady_clock::now();
    if (now - last_ < std::chrono::milliseconds(500) && done_ < total_) return;
    last_ = now;
    const double s = std::chrono::duration<double>(now - start_).count(), rate = static_cast<double>(done_) / std::max(s, 1e-9);
    const int64_t eta = static_cast<int64_t>(static_cast<double>(total_ - std::min(done_, total_)) / std::max(rate, 1.0));
    fmt::print(stderr, "\r{:.2f}/{:.2f} GB, {:.2f} GB/s, ETA {}:{:02d}:{:02d}   ", static_cast<double>(done_) / 1e9,
               static_cast<double>(total_) / 1e9, rate / 1e9, eta / 3600, (eta / 60) % 60, eta % 60);
    if (done_ >= total_) fmt::print(stderr, "\n");
  }

 private:
  uint64_t total_, done_ = 0;
  std::chrono::steady_clock::time_point start_, last_{};
};

int64_t numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

// A full checkpoint written tensor by tensor: model.h5 and a manifest, committed by rename.
class FullWriter {
 public:
  FullWriter(const std::string& out, json manifest) : out_(out), tmp_(out + ".tmp"), manifest_(std::move(manifest)) {
    ST_CHECK(!fs::exists(out_), ErrorKind::kIo, "{} exists already: choose a new directory", out_);
    fs::remove_all(tmp_);
    fs::create_directories(tmp_);
    H5Handle fapl(ST_H5_CHECK(H5Pcreate(H5P_FILE_ACCESS)), H5Pclose);
    ST_H5_CHECK(H5Pset_file_locking(fapl.get(), false, true));
    file_ = H5Handle(ST_H5_CHECK(H5Fcreate((tmp_ + "/model.h5").c_str(), H5F_ACC_EXCL, H5P_DEFAULT, fapl.get())), H5Fclose);
    manifest_["slices"] = json::array();
    manifest_["layout"] = "full";
  }
  void write(const std::string& kind, const std::string& name, const at::Tensor& value) {
    if (!groups_.count(kind))
      groups_.emplace(kind, H5Handle(ST_H5_CHECK(H5Gcreate2(file_.get(), ("/" + kind).c_str(), H5P_DEFAULT, H5P_DEFAULT,
                                                            H5P_DEFAULT)),
                                     H5Gclose));
    const at::Tensor data = value.to(at::kFloat).contiguous();
    std::vector<hsize_t> dims(data.sizes().begin(), data.sizes().end());
    H5Handle space(ST_H5_CHECK(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr)), H5Sclose);
    H5Handle ds(ST_H5_CHECK(H5Dcreate2(groups_.at(kind).get(), name.c_str(), H5T_IEEE_F32LE, space.get(), H5P_DEFAULT,
                                       H5P_DEFAULT, H5P_DEFAULT)),
                H5Dclose);
    ST_H5_CHECK(H5Dwrite(ds.get(), H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, data.data_ptr()));
    manifest_["slices"].push_back({{"kind", kind}, {"tensor", name}, {"file", "model.h5"}, {"dataset", name},
                                   {"offset", 0}, {"length", data.numel()},
                                   {"crc32", checkpoint::crc32(data.data_ptr(), static_cast<size_t>(data.nbytes()))}});
  }
  void commit() {
    groups_.clear();
    ST_H5_CHECK(file_.close());
    std::ofstream(tmp_ + "/manifest.json") << manifest_.dump(1);
    fs::rename(tmp_, out_);
  }

 private:
  std::string out_, tmp_;
  json manifest_;
  H5Handle file_;
  std::map<std::string, H5Handle> groups_;
};

}  // namespace

void consolidate(const std::string& src, const std::string& out) {
  checkpoint::CheckpointReader reader(src);
  json manifest = reader.manifest();
  FullWriter writer(out, manifest);
  uint64_t total = 0;
  for (const std::string& name : reader.tensor_names()) total += static_cast<uint64_t>(numel(reader.shape(name))) * 4;
  Progress progress(total * (reader.has("exp_avg", reader.tensor_names().front()) ? 3 : 1));
  for (const std::string& name : reader.tensor_names())
    for (const char* kind : {"param", "exp_avg", "exp_avg_sq"})
      if (reader.has(kind, name)) {
        writer.write(kind, name, reader.read_tensor(kind, name));
        progress.add(static_cast<uint64_t>(numel(reader.shape(name))) * 4);
      }
  writer.commit();
}

void reshard(const std::string& src, const std::string& out, int world_size) {
  ST_CHECK(world_size >= 1, ErrorKind::kUsage, "--world-size must be at least 1, got {}", world_size);
  checkpoint::CheckpointReader reader(src);
  json manifest = reader.manifest();
  ST_CHECK(manifest.contains("model_config"), ErrorKind::kConfig,
           "{} records no model config.json: its FSDP units cannot be laid out", src);
  model::LlamaForCausalLM skeleton(model::LlamaConfig::from_json(manifest.at("model_config"), src + "/manifest.json"),
                                   at::TensorOptions().device(at::kMeta));
  ST_CHECK(!fs::exists(out), ErrorKind::kIo, "{} exists already: choose a new directory", out);
  const std::string tmp = out + ".tmp";
  fs::remove_all(tmp);
  fs::create_directories(tmp);
  std::vector<fsdp::FlatLayout> layouts;
  uint64_t total = 0;
  for (const auto& unit : fsdp::llama_units(skeleton)) {
    std::vector<fsdp::FlatLayout::Entry> entries;
    for (const model::NamedParam& p : unit) entries.push_back({p.name, p.tensor->sizes().vec()});
    layouts.emplace_back(entries, world_size);
    total += static_cast<uint64_t>(layouts.back().numel()) * 4;
  }
  std::vector<std::string> kinds;
  for (const char* kind : {"param", "exp_avg", "exp_avg_sq"})
    if (reader.has(kind, layouts.front().params().front().name)) kinds.emplace_back(kind);
  Progress progress(total * kinds.size());
  json slices = json::array();
  std::vector<float> buffer;
  for (int r = 0; r < world_size; ++r) {
    const std::string file_name = fmt::format("rank-{:05d}.h5", r);
    H5Handle fapl(ST_H5_CHECK(H5Pcreate(H5P_FILE_ACCESS)), H5Pclose);
    ST_H5_CHECK(H5Pset_file_locking(fapl.get(), false, true));
    H5Handle file(ST_H5_CHECK(H5Fcreate((tmp + "/" + file_name).c_str(), H5F_ACC_EXCL, H5P_DEFAULT, fapl.get())),
                  H5Fclose);
    for (const std::string& kind : kinds) {
      H5Handle group(ST_H5_CHECK(H5Gcreate2(file.get(), ("/" + kind).c_str(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT)),
                     H5Gclose);
      for (const fsdp::FlatLayout& layout : layouts) {
        for (const fsdp::ShardPiece& piece : layout.pieces_in_shard(r)) {
          const fsdp::ParamSpan& p = layout.params()[piece.param];
          buffer.resize(static_cast<size_t>(piece.length));
          reader.read_range(kind, p.name, piece.param_offset, piece.length, buffer.data());
          const std::string dataset = fmt::format("{}@{}", p.name, piece.param_offset);
          const hsize_t dims[1] = {static_cast<hsize_t>(piece.length)};
          H5Handle space(ST_H5_CHECK(H5Screate_simple(1, dims, nullptr)), H5Sclose);
          H5Handle ds(ST_H5_CHECK(H5Dcreate2(group.get(), dataset.c_str(), H5T_IEEE_F32LE, space.get(), H5P_DEFAULT,
                                             H5P_DEFAULT, H5P_DEFAULT)),
                      H5Dclose);
          ST_H5_CHECK(H5Dwrite(ds.get(), H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, buffer.data()));
          slices.push_back({{"kind", kind}, {"tensor", p.name}, {"file", file_name}, {"dataset", dataset},
                            {"offset", piece.param_offset}, {"length", piece.length},
                            {"crc32", checkpoint::crc32(buffer.data(), buffer.size() * sizeof(float))}});
          progress.add(static_cast<uint64_t>(piece.length) * 4);
        }
      }
    }
    ST_H5_CHECK(file.close());
  }
  manifest["slices"] = slices;
  manifest["layout"] = "sharded";
  manifest["world_size"] = world_size;
  manifest["shard_group_size"] = world_size;
  std::ofstream(tmp + "/manifest.json") << manifest.dump(1);
  fs::rename(tmp, out);
}

void export_hf(const std::string& src, const std::string& out, const std::string& dtype, uint64_t max_shard_bytes,
               const std::string& tokenizer_dir) {
  checkpoint::CheckpointReader reader(src);
  ST_CHECK(reader.manifest().contains("model_config"), ErrorKind::kConfig,
           "{} records no model config.json, so it cannot become a Hugging Face folder", src);
  json config = reader.manifest().at("model_config");
  const model::LlamaConfig cfg = model::LlamaConfig::from_json(config, src + "/manifest.json model_config");
  const checkpoint::StDtype st = dtype == "bf16" ? checkpoint::StDtype::kBF16 : checkpoint::StDtype::kF32;
  config["torch_dtype"] = dtype == "bf16" ? "bfloat16" : "float32";
  // Shards in Hugging Face's parameter order, each at most max_shard_bytes (a larger tensor alone).
  model::LlamaForCausalLM skeleton(cfg, at::TensorOptions().device(at::kMeta));
  std::vector<std::vector<checkpoint::StreamedTensor>> shards(1);
  uint64_t in_shard = 0, total = 0;
  for (const model::NamedParam& p : skeleton.named_parameters()) {
    const std::vector<int64_t> shape(p.tensor->sizes().begin(), p.tensor->sizes().end());
    ST_CHECK(reader.has("param", p.name), ErrorKind::kConfig, "{} lacks tensor {}", src, p.name);
    const uint64_t bytes = static_cast<uint64_t>(numel(shape)) * checkpoint::st_dtype_size(st);
    if (in_shard > 0 && in_shard + bytes > max_shard_bytes) {
      shards.emplace_back();
      in_shard = 0;
    }
    shards.back().push_back({p.name, st, shape});
    in_shard += bytes;
    total += bytes;
  }
  ST_CHECK(!fs::exists(out) || fs::is_empty(out), ErrorKind::kIo, "{} is not empty: choose a new directory", out);
  fs::create_directories(out);
  Progress progress(total);
  json weight_map = json::object();
  for (size_t i = 0; i < shards.size(); ++i) {
    const std::string name = shards.size() == 1 ? std::string(checkpoint::kSafeWeightsName)
                                                : fmt::format("model-{:05d}-of-{:05d}.safetensors", i + 1, shards.size());
    checkpoint::SafetensorsStreamWriter writer(out + "/" + name, shards[i], {{"format", "pt"}});
    for (const checkpoint::StreamedTensor& t : shards[i]) {
      writer.append(reader.read_tensor("param", t.name));
      weight_map[t.name] = name;
      progress.add(static_cast<uint64_t>(numel(t.shape)) * checkpoint::st_dtype_size(st));
    }
    writer.finish();
  }
  if (shards.size() > 1)
    std::ofstream(out + "/" + checkpoint::kSafeWeightsIndexName)
        << json{{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}}.dump(2);
  std::ofstream(out + "/config.json") << config.dump(2);
  if (!tokenizer_dir.empty())
    for (const char* f : checkpoint::kTokenizerFileNames)
      if (fs::exists(fs::path(tokenizer_dir) / f)) fs::copy_file(fs::path(tokenizer_dir) / f, fs::path(out) / f);
}

void import_hf(const std::string& hf_dir, const std::string& out) {
  const checkpoint::HfFolder folder = checkpoint::HfFolder::open(hf_dir);
  const model::LlamaConfig cfg = model::LlamaConfig::from_json(folder.config(), hf_dir + "/config.json");
  json manifest = {{"format", "shardtune-sharded"}, {"version", checkpoint::kShardedFormatVersion},
                   {"step", 0}, {"epoch", 0}, {"sample_in_epoch", 0}, {"loss_scale", 0.0}, {"optimizer_step", 0},
                   {"has_optimizer", false}, {"world_size", 1}, {"shard_group_size", 1}, {"job", ""},
                   {"model_config", cfg.to_json()}};
  json tensors = json::object();
  model::LlamaForCausalLM skeleton(cfg, at::TensorOptions().device(at::kMeta));
  uint64_t total = 0;
  for (const model::NamedParam& p : skeleton.named_parameters()) {
    ST_CHECK(folder.info(p.name).shape == std::vector<int64_t>(p.tensor->sizes().begin(), p.tensor->sizes().end()),
             ErrorKind::kConfig, "{}: {} does not have the shape config.json implies", hf_dir, p.name);
    tensors[p.name] = {{"shape", p.tensor->sizes().vec()}, {"dtype", "F32"}};
    total += static_cast<uint64_t>(p.tensor->numel()) * 4;
  }
  manifest["tensors"] = tensors;
  FullWriter writer(out, manifest);
  Progress progress(total);
  for (const model::NamedParam& p : skeleton.named_parameters()) {
    writer.write("param", p.name, checkpoint::read_tensor(folder.file_of(p.name), p.name));
    progress.add(static_cast<uint64_t>(p.tensor->numel()) * 4);
  }
  writer.commit();
}

double diff(const std::string& a, const std::string& b) {
  checkpoint::CheckpointReader ra(a), rb(b);
  double worst = 0;
  for (const std::string& name : ra.tensor_names()) {
    if (!rb.has("param", name)) {
      fmt::print("{}: only in {}\n", name, a);
      worst = std::numeric_limits<double>::infinity();
      continue;
    }
    if (ra.shape(name) != rb.shape(name)) {
      fmt::print("{}: shapes differ\n", name);
      worst = std::numeric_limits<double>::infinity();
      continue;
    }
    const at::Tensor x = ra.read_tensor("param", name).to(at::kDouble), y = rb.read_tensor("param", name).to(at::kDouble);
    const double abs_diff = (x - y).abs().max().item<double>();
    const double rel = abs_diff / std::max(y.abs().max().item<double>(), 1e-30);
    fmt::print("{:<56} max abs {:.3e}  max rel {:.3e}\n", name, abs_diff, rel);
    worst = std::max(worst, abs_diff);
  }
  for (const std::string& name : rb.tensor_names())
    if (!ra.has("param", name)) {
      fmt::print("{}: only in {}\n", name, b);
      worst = std::numeric_limits<double>::infinity();
    }
  return worst;
}

}  // namespace shardtune::tools
