// shardtune-ckpt's LoRA commands, for adapter checkpoints (written by jobs with [peft] method =
// "lora"): export-peft writes a PEFT adapter folder (adapter_config.json,
// adapter_model.safetensors) that peft's PeftModel.from_pretrained loads; merge-lora writes the
// base model with every adapter merged in (W + (alpha / r) B A) as a Hugging Face folder laid out
// as the base's, a block of rows at a time, so memory stays bounded whatever the model. merge-lora
// refuses a base whose identity (config.json and tensor index) is not the one the checkpoint records.
#pragma once

#include <string>

namespace shardtune::tools {

void export_peft(const std::string& src, const std::string& out);
void merge_lora(const std::string& src, const std::string& base_dir, const std::string& out);

}  // namespace shardtune::tools
