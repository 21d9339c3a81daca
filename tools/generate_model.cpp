#include "tools/generate_model.h"

#include <ATen/ATen.h>
#include <fmt/format.h>

#include <filesystem>
#include <map>

#include "checkpoint/adapter_base.h"
#include "checkpoint/checkpoint_reader.h"
#include "checkpoint/commit.h"
#include "checkpoint/hf/bnb_nf4.h"
#include "checkpoint/hf/hf_folder.h"
#include "checkpoint/hf/hf_model_io.h"
#include "checkpoint/hf/safetensors_torch.h"
#include "checkpoint/hf/weights_digest.h"
#include "common/error.h"
#include "common/job/job_loader.h"
#include "common/job/schema.h"
#include "runtime/model/init.h"
#include "runtime/model/lora.h"
#include "runtime/quant/nf4.h"
#include "tools/base_check.h"

namespace shardtune::tools {
namespace {

using common::ErrorKind;
namespace fs = std::filesystem;

std::string existing(const std::string& path) { return fs::exists(path) ? path : std::string(); }

// A tensor's values as NF4 stores them: quantised in blocks and dequantised (QLoRA's base).
// Quantised from the dtype training rounded the base to first (nf4_quantised_from).
void to_nf4_values(at::Tensor& t, const quant::Nf4Format& format, at::ScalarType quantised_from) {
  const at::Tensor x = t.to(quantised_from).to(at::kFloat).contiguous();
  const quant::BnbTensor q = quant::quantize_tensor(x.data_ptr<float>(), x.numel(), format);
  const std::vector<uint8_t> records = quant::records_from_bnb(q, x.numel(), format);
  const int64_t count = (x.numel() + format.record_elements() - 1) / format.record_elements();
  std::vector<float> values(static_cast<size_t>(count * format.record_elements()));
  quant::dequantize_records(records.data(), count, format, values.data());
  t.copy_(at::from_blob(values.data(), {x.numel()}, at::kFloat).view(t.sizes()));
}

// A base stored in 4 bits as bitsandbytes writes it (the QLoRA base a job trained on as it is):
// each projection's NF4 records dequantised, the rest read as stored.
void load_bnb_base(model::LlamaForCausalLM& m, const checkpoint::HfFolder& folder) {
  const std::map<std::string, checkpoint::BnbNf4Weight> nf4 = checkpoint::read_bnb_nf4_weights(folder);
  for (const model::NamedParam& p : m.named_parameters()) {
    const auto w = nf4.find(p.name);
    if (w == nf4.end()) {
      p.tensor->copy_(checkpoint::read_tensor(folder.file_of(p.name), p.name).to(at::kFloat).view(p.tensor->sizes()));
      continue;
    }
    const quant::Nf4Format& f = w->second.format;
    const int64_t records = f.records(w->second.numel);
    std::vector<uint8_t> raw(static_cast<size_t>(records * f.record_bytes()));
    uint64_t bytes = 0;
    checkpoint::read_bnb_records(folder, w->second, 0, records, raw.data(), &bytes);
    std::vector<float> values(static_cast<size_t>(records * f.record_elements()));
    quant::dequantize_records(raw.data(), records, f, values.data());
    p.tensor->copy_(at::from_blob(values.data(), {w->second.numel}, at::kFloat).view(p.tensor->sizes()));
  }
}

// The base of an adapter checkpoint: its folder (checked against the identity the checkpoint
// records), or the preset's random initialisation from the job's seed.
void load_base(model::LlamaForCausalLM& m, const checkpoint::AdapterRecord& a, const std::string& base,
               const std::string& src, const job::Job& job) {
  if (base.rfind("preset:", 0) == 0) {
    model::init_weights(m, static_cast<uint64_t>(job.train.seed));
    return;
  }
  const checkpoint::HfFolder folder = checkpoint::HfFolder::open(base);
  // The config, the index and each tensor's first bytes at once; every byte as it loads (as
  // merge-lora and a resume compare them).
  checkpoint::AdapterRecord here = check_adapter_base(a, folder, base, src);
  checkpoint::WeightsDigest digest(folder);
  if (checkpoint::is_bnb_4bit(folder)) {
    load_bnb_base(m, folder);
    digest.complete(folder);
  } else {
    checkpoint::load_hf_weights(m, folder, &digest);
  }
  here.base_weights_sha256 = digest.hex();
  const std::optional<std::string> mismatch = checkpoint::base_mismatch(a, here);
  ST_CHECK(!mismatch, ErrorKind::kConfig, "{} is not the base model the adapters of {} were trained on: {}", base, src,
           mismatch.value_or(""));
}

GenerationModel from_checkpoint(const std::string& dir, const std::string& base_override,
                                const at::TensorOptions& options) {
  checkpoint::CheckpointReader reader(dir);
  const checkpoint::Manifest& manifest = reader.manifest();
  ST_CHECK(!manifest.model_config.is_null(), ErrorKind::kConfig, "{} records no model config.json", dir);
  const job::LoadedJob loaded = job::parse_job(manifest.job_toml, dir + "/manifest.json (its job)");
  const job::Job& job = loaded.job;
  GenerationModel out;
  out.model = std::make_unique<model::LlamaForCausalLM>(
      model::LlamaConfig::from_json(manifest.model_config, dir + "/manifest.json"), at::TensorOptions().dtype(at::kFloat));
  model::LlamaForCausalLM& m = *out.model;
  std::string what = fmt::format("checkpoint {} (step {}, saved by {} rank(s))", dir, manifest.step, manifest.world_size);
  if (manifest.adapter) {
    const checkpoint::AdapterRecord& a = *manifest.adapter;
    const std::string base = base_override.empty() ? a.base_path : base_override;
    load_base(m, a, base, dir, job);
    // A bitsandbytes base holds its NF4 values already; a plain one is quantised as training did.
    const bool stored_nf4 = base.rfind("preset:", 0) != 0 && checkpoint::is_bnb_4bit(checkpoint::HfFolder::open(base));
    if (a.method == "qlora" && !stored_nf4) {
      const quant::Nf4Format nf4{a.nf4_block_size, a.nf4_double_quant};
      const at::ScalarType quantised_from = nf4_quantised_from(manifest, dir);
      for (const model::NamedParam& p : m.named_parameters())
        if (quant::is_nf4_weight(p.name)) to_nf4_values(*p.tensor, nf4, quantised_from);
    }
    model::add_lora(m, {a.r, a.alpha, 0.0, a.target_modules}, 0);
    what += fmt::format(", {} adapters (r = {}) on {}", a.method == "qlora" ? "QLoRA" : "LoRA", a.r, base);
  }
  for (const model::NamedParam& p : m.named_parameters()) {
    if (manifest.adapter && !model::is_adapter_parameter(p.name)) continue;
    ST_CHECK(reader.has("param", p.name), ErrorKind::kIo, "{} holds no {}", dir, p.name);
    p.tensor->copy_(reader.read_tensor("param", p.name).view(p.tensor->sizes()));
  }
  // The tokenizer and chat format the job trained with.
  const std::string model_dir = manifest.adapter && manifest.adapter->base_path.rfind("preset:", 0) != 0
                                    ? (base_override.empty() ? manifest.adapter->base_path : base_override)
                                    : job.model.path;
  out.tokenizer = !job.data.tokenizer.empty() ? job.data.tokenizer
                  : model_dir.empty()         ? std::string()
                                              : existing(model_dir + "/tokenizer.json");
  // Preference pairs may be conversations, rendered in the chat format the job names.
  if (job.data.format == job::DataFormat::kChat || job.data.format == job::DataFormat::kPreference)
    out.chat_format = std::string(job::enum_name(job.data.chat_format));
  out.description = what;
  for (const model::NamedParam& p : m.named_parameters()) *p.tensor = p.tensor->to(options);
  return out;
}

}  // namespace

GenerationModel load_generation_model(const std::string& source, const std::string& base, const std::string& tokenizer,
                                      const at::TensorOptions& options) {
  ST_CHECK(fs::is_directory(source), ErrorKind::kUsage,
           "{} is not a folder: give a Hugging Face model folder, a checkpoint, or a job's output folder", source);
  GenerationModel out;
  if (fs::exists(source + "/manifest.json")) {
    out = from_checkpoint(checkpoint::pinned_dir(source), base, options);  // a path through `latest`, read once
  } else if (fs::exists(source + "/checkpoints/latest")) {
    out = from_checkpoint(fs::canonical(source + "/checkpoints/latest").string(), base, options);
  } else {
    ST_CHECK(fs::exists(source + "/config.json"), ErrorKind::kUsage,
             "{} holds no config.json (a Hugging Face model folder), manifest.json (a checkpoint) or "
             "checkpoints/latest (a job's output folder)",
             source);
    const checkpoint::HfFolder folder = checkpoint::HfFolder::open(source);
    out.model = std::make_unique<model::LlamaForCausalLM>(model::LlamaConfig::from_file(source + "/config.json"),
                                                          at::TensorOptions().dtype(at::kFloat));
    checkpoint::load_hf_weights(*out.model, folder);
    for (const model::NamedParam& p : out.model->named_parameters()) *p.tensor = p.tensor->to(options);
    out.tokenizer = existing(source + "/tokenizer.json");
    out.description = "Hugging Face folder " + source;
  }
  if (!tokenizer.empty()) out.tokenizer = tokenizer;
  if (out.chat_format.empty()) out.chat_format = "auto";
  return out;
}

}  // namespace shardtune::tools
