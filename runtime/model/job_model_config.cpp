// The job's model shape.
#include "runtime/model/job_model_config.h"

#include <filesystem>

#include "runtime/data/tokenizer.h"

namespace shardtune::model {

LlamaConfig job_model_config(const job::Job& job, const std::string& tokenizer_json) {
  if (job.model.preset != job::ModelPreset::kTiny) return LlamaConfig::from_file(job.model.path + "/config.json");
  LlamaConfig c = LlamaConfig::tiny();
  const bool json = tokenizer_json.size() >= 5 && tokenizer_json.compare(tokenizer_json.size() - 5, 5, ".json") == 0;
  if (json && std::filesystem::exists(tokenizer_json)) {
    const data::Tokenizer tokenizer = data::Tokenizer::from_file(tokenizer_json);
    c.vocab_size = tokenizer.vocab_size();
    if (auto bos = tokenizer.bos_id()) c.bos_token_id = *bos;
    if (auto eos = tokenizer.eos_id()) c.eos_token_ids = {*eos};
  }
  return c;
}

bool streams_weights(const job::Job& job, const LlamaConfig& config) {
  if (job.model.path.empty() || job.model.init != job::ModelInit::kPretrained) return false;
  const int64_t threshold = job.fsdp.low_cpu_fsdp_min_params;
  return job.fsdp.low_cpu_fsdp || (threshold > 0 && config.num_parameters() >= threshold) ||
         (job.peft.method == job::PeftMethod::kQlora && config.bnb_4bit);
}

}  // namespace shardtune::model
