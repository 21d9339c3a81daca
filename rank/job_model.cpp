// Building the job's model.
#include "rank/job_model.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "common/job/job_checks.h"
#include "common/job/schema.h"

#include "checkpoint/hf/hf_model_io.h"
#include "checkpoint/hf/peft_adapter.h"
#include "runtime/model/init.h"

namespace shardtune::rank_program {

bool job_fits_model(const job::Job& job, const model::LlamaConfig& config, bool reports) {
  const std::string source = job.model.preset != job::ModelPreset::kNone
                                 ? fmt::format("preset \"{}\"", job::enum_name(job.model.preset))
                                 : job.model.path + "/config.json";
  job::Diagnostics diags;
  job::check_against_model(job, {source, config.num_hidden_layers}, {}, job.job.output_dir + "/job.toml", diags);
  if (!diags.has_errors()) return true;
  if (reports) fmt::print(stderr, "{}", diags.to_string());
  return false;
}

std::unique_ptr<model::LlamaForCausalLM> build_model(const job::Job& job, const model::LlamaConfig& config,
                                                     checkpoint::WeightsDigest* digest) {
  auto m = std::make_unique<model::LlamaForCausalLM>(config, at::TensorOptions().dtype(at::kFloat));
  if (job.model.preset == job::ModelPreset::kTiny || job.model.init == job::ModelInit::kRandom) {
    model::init_weights(*m, static_cast<uint64_t>(job.train.seed));
  } else {
    checkpoint::load_hf_weights(*m, checkpoint::HfFolder::open(job.model.path), digest);
  }
  return m;
}

std::optional<model::LoraSpec> lora_spec(const job::Job& job) {
  if (!job.peft.adapters()) return std::nullopt;
  const job::PeftSection& p = job.peft;
  return model::LoraSpec{p.lora_r, p.lora_alpha, p.lora_dropout, model::expand_lora_targets(p.target_modules)};
}

void add_job_adapters(const job::Job& job, model::LlamaForCausalLM& model) {
  const std::optional<model::LoraSpec> spec = lora_spec(job);
  if (!spec) return;
  model::add_lora(model, *spec, static_cast<uint64_t>(job.train.seed));
  if (!job.peft.from_peft_checkpoint.empty()) {
    checkpoint::load_peft_adapter(model, *spec, job.peft.from_peft_checkpoint);
    spdlog::info("LoRA adapters from {}", job.peft.from_peft_checkpoint);
  }
}

std::set<std::string> frozen_parameters(const job::Job& job, model::LlamaForCausalLM& model) {
  std::set<std::string> out;
  if (job.peft.adapters()) {
    for (const model::NamedParam& p : model.named_parameters())
      if (!model::is_adapter_parameter(p.name)) out.insert(p.name);
    return out;
  }
  if (!job.train.freeze_layers) return out;
  for (const model::NamedParam& p : model.named_parameters())
    for (int64_t l = 0; l < job.train.num_freeze_layers; ++l)
      if (p.name.rfind("model.layers." + std::to_string(l) + ".", 0) == 0) out.insert(p.name);
  return out;
}

}  // namespace shardtune::rank_program
