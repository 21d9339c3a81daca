// LoRA adapter checkpoints out of shardtune: a PEFT adapter folder, or the base model with the
// adapters merged in, written row block by row block.
#include "tools/ckpt_lora.h"

#include <ATen/TensorOperators.h>
#include <ATen/ops/from_blob.h>
#include <ATen/ops/matmul.h>
#include <fmt/format.h>

#include <filesystem>
#include <map>
#include <optional>
#include <nlohmann/json.hpp>

#include "checkpoint/adapter_base.h"
#include "checkpoint/checkpoint_reader.h"
#include "checkpoint/hf/bnb_nf4.h"
#include "checkpoint/hf/weights_digest.h"
#include "checkpoint/hf/hf_folder.h"
#include "checkpoint/hf/peft_adapter.h"
#include "checkpoint/hf/safetensors_stream_writer.h"
#include "checkpoint/hf/safetensors_torch.h"
#include "common/aligned_vector.h"
#include "common/error.h"
#include "common/file_io.h"
#include "common/pending_folder.h"
#include "common/process_memory.h"
#include "tools/base_check.h"
#include "runtime/fsdp/nf4_storage.h"
#include "runtime/quant/nf4.h"
#include "tools/tool_progress.h"

namespace shardtune::tools {
namespace {

namespace fs = std::filesystem;
using common::ErrorKind;

// Rows of a weight merged at a time: at most this many elements (32 MiB of float32).
constexpr int64_t kMergeElements = int64_t(8) << 20;

// One NF4 projection of a QLoRA base, merged as training computed with it: rounded to the dtype
// training quantised from (`quantised_from`: the job's frozen dtype), quantised to NF4 and
// dequantised (fp32), plus scale · B·A when it has an adapter, written in the stored dtype. Two
// passes over the tensor, whole records at a time: the blocks' maxima (the tensor's offset), then
// the records, each read once more and fed to the digest in order.
void merge_nf4_tensor(const checkpoint::SafetensorsFile& file, const checkpoint::TensorInfo& t, int64_t cols,
                      const quant::Nf4Format& nf4, at::ScalarType quantised_from,
                      const std::pair<at::Tensor, at::Tensor>* adapter, double scale,
                      checkpoint::WeightsDigest& digest, checkpoint::SafetensorsStreamWriter& writer,
                      common::Progress& progress) {
  const int64_t element = static_cast<int64_t>(common::element_size(t.dtype));
  const int64_t numel = static_cast<int64_t>(t.nbytes) / element, per = nf4.record_elements();
  const int64_t chunk = std::max<int64_t>(1, kMergeElements / per) * per;
  common::AlignedVector<std::byte> raw;
  auto read = [&](int64_t first, int64_t n) {
    raw.resize(static_cast<size_t>(n * element));
    file.read_bytes(t, static_cast<uint64_t>(first * element), raw.size(), raw.data());
    return at::from_blob(raw.data(), {n}, checkpoint::to_scalar_type(t.dtype))
        .to(quantised_from)
        .to(at::kFloat)
        .contiguous();
  };
  quant::ExactSum sum;
  std::vector<float> absmax(static_cast<size_t>(chunk / nf4.block_size));
  for (int64_t first = 0; first < numel; first += chunk) {
    const int64_t n = std::min(chunk, numel - first);
    const at::Tensor x = read(first, n);
    fsdp::check_finite(x, t.name, first);
    quant::block_absmax(x.data_ptr<float>(), n, nf4, absmax.data(), &sum);
  }
  const float offset = quant::mean_absmax(sum, (numel + nf4.block_size - 1) / nf4.block_size);
  std::vector<uint8_t> records(static_cast<size_t>(chunk / per * nf4.record_bytes()));
  std::vector<float> values(static_cast<size_t>(chunk));
  for (int64_t first = 0; first < numel; first += chunk) {
    const int64_t n = std::min(chunk, numel - first), count = (n + per - 1) / per;
    const at::Tensor x = read(first, n);
    digest.add(t.name, static_cast<uint64_t>(first * element), raw.data(), raw.size());
    quant::quantize_records(x.data_ptr<float>(), n, count, offset, nf4, records.data());
    quant::dequantize_records(records.data(), count, nf4, values.data());
    at::Tensor part = at::from_blob(values.data(), {n}, at::kFloat);
    if (adapter != nullptr) {  // the rows this range touches, then the range itself
      const int64_t r0 = first / cols, r1 = (first + n + cols - 1) / cols;
      const at::Tensor delta = at::matmul(adapter->second.narrow(0, r0, r1 - r0), adapter->first).reshape({-1});
      part = part + delta.narrow(0, first - r0 * cols, n) * scale;
    }
    writer.append_elements(part);
    progress.add(n * element);
  }
}

const checkpoint::AdapterRecord& adapter_of(const checkpoint::CheckpointReader& reader, const char* instead) {
  ST_CHECK(reader.manifest().adapter.has_value(), ErrorKind::kConfig,
           "{} holds a whole model, not LoRA adapters: {}", reader.dir(), instead);
  return *reader.manifest().adapter;
}

}  // namespace

void export_peft(const std::string& src, const std::string& out) {
  checkpoint::CheckpointReader reader(src);
  const checkpoint::AdapterRecord& a = adapter_of(reader, "export-hf writes it as a Hugging Face folder");
  checkpoint::PeftAdapterConfig config;
  config.lora = {a.r, a.alpha, a.dropout, a.target_modules};
  config.base_model_name_or_path = a.base_path;
  std::vector<std::pair<std::string, at::Tensor>> tensors;
  for (const std::string& name : reader.tensor_names()) tensors.emplace_back(name, reader.read_tensor("param", name));
  common::PendingFolder pending(out);
  checkpoint::write_peft_adapter(pending.path(), config, tensors);
  pending.commit();
  fmt::print(stderr, "exported {} adapter tensors (r = {}, alpha = {}, on {}) to {}\n", tensors.size(), a.r, a.alpha,
             a.base_path, out);
}

namespace {

// Every targeted weight's adapter pair (small: r rows or columns), by weight name: (A, B); each
// checked against the base's weight it merges into.
using Adapters = std::map<std::string, std::pair<at::Tensor, at::Tensor>>;
Adapters read_adapters(checkpoint::CheckpointReader& reader, const checkpoint::HfFolder& base, const std::string& src,
                       const std::string& base_dir) {
  Adapters adapters;
  for (const std::string& name : reader.tensor_names()) {
    const std::string suffix = ".lora_A.weight";
    if (name.size() <= suffix.size() || name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0) continue;
    const std::string module = name.substr(0, name.size() - suffix.size());
    adapters[module + ".weight"] = {reader.read_tensor("param", name), reader.read_tensor("param", module + ".lora_B.weight")};
  }
  for (const auto& [weight, pair] : adapters) {
    ST_CHECK(weight != "lm_head.weight" || !base.config().value("tie_word_embeddings", false), ErrorKind::kConfig,
             "{}: the head is tied to the input embeddings, so merging lm_head's adapter would change the embeddings "
             "too; export the adapters with export-peft instead",
             src);
    const checkpoint::TensorInfo& w = base.info(weight);  // throws naming the folder when it has no such weight
    ST_CHECK(w.shape.size() == 2 && w.shape[0] == pair.second.size(0) && w.shape[1] == pair.first.size(1),
             ErrorKind::kConfig, "{}: {} has shape [{}, {}] in {}, the adapter ({} x {}) x ({} x {}) does not fit it", src,
             weight, w.shape.empty() ? 0 : w.shape[0], w.shape.size() < 2 ? 0 : w.shape[1], base_dir,
             pair.second.size(0), pair.second.size(1), pair.first.size(0), pair.first.size(1));
  }
  return adapters;
}

// One tensor of the base copied a block of rows at a time, W + scale · B·A in fp32 where it has an
// adapter (`adapter`: (A, B), or null), every byte read into the base's digest.
void merge_plain_tensor(const checkpoint::SafetensorsFile& file, const checkpoint::TensorInfo& t, int64_t rows,
                        int64_t cols, const std::pair<at::Tensor, at::Tensor>* adapter, double scale,
                        checkpoint::WeightsDigest& digest, checkpoint::SafetensorsStreamWriter& writer,
                        common::Progress& progress, common::AlignedVector<std::byte>& raw) {
  const int64_t element = static_cast<int64_t>(common::element_size(t.dtype));
  const int64_t block = std::max<int64_t>(1, kMergeElements / cols);
  for (int64_t r0 = 0; r0 < rows; r0 += block) {
    const int64_t n = std::min(block, rows - r0);
    raw.resize(static_cast<size_t>(n * cols * element));
    file.read_bytes(t, static_cast<uint64_t>(r0 * cols * element), raw.size(), raw.data());
    digest.add(t.name, static_cast<uint64_t>(r0 * cols * element), raw.data(), raw.size());
    at::Tensor part = at::from_blob(raw.data(), {n, cols}, checkpoint::to_scalar_type(t.dtype));
    if (adapter != nullptr) part = part.to(at::kFloat) + at::matmul(adapter->second.narrow(0, r0, n), adapter->first) * scale;
    writer.append_elements(part.reshape({-1}));
    progress.add(static_cast<int64_t>(raw.size()));
  }
}

}  // namespace

void merge_lora(const std::string& src, const std::string& base_dir, const std::string& out) {
  checkpoint::CheckpointReader reader(src);
  const checkpoint::AdapterRecord& a = adapter_of(reader, "there is nothing to merge");
  const checkpoint::HfFolder base = checkpoint::HfFolder::open(base_dir);
  ST_CHECK(!checkpoint::is_bnb_4bit(base), ErrorKind::kConfig,
           "{} stores its projections in 4 bits (a bitsandbytes folder), which merge-lora does not read yet: export "
           "the adapters with export-peft instead",
           base_dir);
  // The config, the tensor index and each tensor's first bytes now; every byte as the merge reads it.
  checkpoint::AdapterRecord here = check_adapter_base(a, base, base_dir, src);
  checkpoint::WeightsDigest digest(base);
  common::PendingFolder pending(out);  // OUT appears whole, or not at all

  const double scale = a.alpha / static_cast<double>(a.r);
  const Adapters adapters = read_adapters(reader, base, src, base_dir);

  // Every file of the base rewritten with the same tensors, in the same order and dtypes; a
  // targeted weight gets W + scale · B·A, in fp32, a block of rows at a time. QLoRA: the blocks'
  // projections are first what training computed with, their NF4 values.
  std::optional<quant::Nf4Format> nf4;
  if (a.method == "qlora") nf4 = quant::Nf4Format{a.nf4_block_size, a.nf4_double_quant};
  const at::ScalarType quantised_from = nf4_quantised_from(reader.manifest(), src);
  size_t merged = 0, dequantized = 0;
  uint64_t total = 0;
  for (const checkpoint::SafetensorsFile& file : base.files())
    for (const checkpoint::TensorInfo& t : file.tensors()) total += t.nbytes;
  common::Progress progress(tool_progress("merging", static_cast<int64_t>(total)));
  nlohmann::json weight_map = nlohmann::json::object();
  common::AlignedVector<std::byte> raw;
  for (const checkpoint::SafetensorsFile& file : base.files()) {
    const std::string name = fs::path(file.path()).filename().string();
    std::vector<checkpoint::StreamedTensor> declared;
    for (const checkpoint::TensorInfo& t : file.tensors()) declared.push_back({t.name, t.dtype, t.shape});
    checkpoint::SafetensorsStreamWriter writer((fs::path(pending.path()) / name).string(), declared, file.metadata());
    for (const checkpoint::TensorInfo& t : file.tensors()) {
      weight_map[t.name] = name;
      const int64_t cols = t.shape.empty() ? 1 : std::max<int64_t>(t.shape.back(), 1);
      const int64_t rows = static_cast<int64_t>(t.nbytes) / static_cast<int64_t>(common::element_size(t.dtype)) / cols;
      const auto adapter = adapters.find(t.name);
      if (nf4 && quant::is_nf4_weight(t.name)) {
        merge_nf4_tensor(file, t, cols, *nf4, quantised_from, adapter != adapters.end() ? &adapter->second : nullptr,
                         scale, digest,
                         writer, progress);
        if (adapter != adapters.end()) ++merged;
        ++dequantized;
        continue;
      }
      merge_plain_tensor(file, t, rows, cols, adapter != adapters.end() ? &adapter->second : nullptr, scale, digest,
                         writer, progress, raw);
      if (adapter != adapters.end()) ++merged;
    }
    writer.finish();
  }
  ST_CHECK(merged == adapters.size(), ErrorKind::kInternal, "merged {} of {} adapters", merged, adapters.size());
  here.base_weights_sha256 = digest.hex();
  const std::optional<std::string> late = checkpoint::base_mismatch(a, here);
  ST_CHECK(!late, ErrorKind::kConfig, "{} is not the base model the adapters of {} were trained on: {}; nothing was "
           "written to {}", base_dir, src, late.value_or(""), out);
  const fs::path dir = pending.path();
  if (base.files().size() > 1)
    common::write_file_atomically((dir / checkpoint::kSafeWeightsIndexName).string(),
                                  nlohmann::json{{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}}.dump(2));
  common::write_file_atomically((dir / "config.json").string(),
                                common::read_file((fs::path(base_dir) / "config.json").string()));
  for (const std::string& f : base.tokenizer_files()) fs::copy_file(fs::path(base_dir) / f, dir / f);
  pending.commit();
  progress.finish("merged", fmt::format(", {} adapters (scale {}) into {} tensors of {}{}: {}{}", merged, scale,
                                       weight_map.size(), base_dir,
                                       nf4 ? fmt::format(" ({} projections as their NF4 values, blocks of {})",
                                                         dequantized, nf4->block_size)
                                           : "",
                                       out, peak_memory_note()));
}

}  // namespace shardtune::tools
