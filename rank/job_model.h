// The model a job asks for, built on every rank: a preset or a Hugging Face folder, with random
// (transformers-style, seeded) or pretrained weights, and the names of the parameters it freezes.
#pragma once

#include <memory>
#include <optional>
#include <set>
#include <string>

#include "common/job/job.h"
#include "runtime/model/llama.h"
#include "runtime/model/lora.h"

namespace shardtune::checkpoint {
class WeightsDigest;
}

namespace shardtune::rank_program {

// The job's keys whose bounds depend on the model (job::check_against_model), checked on every rank
// before anything is built: false, with the errors printed by the rank that `reports`, when the job
// does not fit the model.
bool job_fits_model(const job::Job& job, const model::LlamaConfig& config, bool reports);

// The whole model with values, on every rank (not streamed).
// `digest`, when given, hears every weight byte read.
std::unique_ptr<model::LlamaForCausalLM> build_model(const job::Job& job, const model::LlamaConfig& config,
                                                     checkpoint::WeightsDigest* digest = nullptr);

// The job's LoRA adapters ([peft] method = "lora"), or nullopt for full fine-tuning.
std::optional<model::LoraSpec> lora_spec(const job::Job& job);

// With LoRA: adds the adapters to the model (whose base may be on the meta device; adapters are
// always real fp32 CPU tensors), fresh (seeded by [train] seed) or from [peft] from_peft_checkpoint.
// Without LoRA: nothing.
void add_job_adapters(const job::Job& job, model::LlamaForCausalLM& model);

// The parameters that get no gradient and no optimizer state: with LoRA, the whole base model;
// with freeze_layers, every parameter of the first num_freeze_layers blocks.
std::set<std::string> frozen_parameters(const job::Job& job, model::LlamaForCausalLM& model);

}  // namespace shardtune::rank_program
