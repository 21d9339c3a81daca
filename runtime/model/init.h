// Giving a model real storage and values: materialize a meta-constructed model, and initialise it
// the way transformers does (normal(0, initializer_range) weights, zero biases, unit norms).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

#include "runtime/model/llama.h"

namespace shardtune::model {

// Allocates every parameter with `options` (uninitialised). For a model built on the meta device.
void materialize(LlamaForCausalLM& model, const at::TensorOptions& options);

// transformers' _init_weights. Each parameter draws from its own generator, seeded from `seed`
// and its name, so a parameter's values do not depend on which other parameters a rank holds.
void init_weights(LlamaForCausalLM& model, uint64_t seed);

// One parameter as init_weights would set it (so tools can write huge models one tensor at a time).
// LoRA adapters as PEFT initialises them: A Kaiming-uniform, B zero.
void init_parameter(const std::string& name, at::Tensor& tensor, double std, uint64_t seed);

// The generator seed of one parameter.
uint64_t parameter_seed(uint64_t seed, const std::string& name);

}  // namespace shardtune::model
