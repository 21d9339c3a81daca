// The planner's activations of a block on a GPU against what the block keeps when it runs the fused
// operations: measured on the CPU with the kernels' host references (the same autograd functions
// and saved tensors as on a GPU), by counting the bytes of the tensors still alive after a forward
// whose graph is kept. The attention differs between the two (LibTorch 1.13's CPU attention keeps
// its softmax; flash attention keeps its output and a log-sum-exp per head): its own share is
// measured apart, on inputs of the same shapes, and left out of both sides.
#include <ATen/ops/arange.h>
#include <ATen/ops/randn.h>
#include <gtest/gtest.h>

#include "common/job/job.h"
#include "launcher/memory_plan.h"
#include "runtime/model/fused_ops.h"
#include "runtime/model/init.h"
#include "runtime/model/llama.h"
#include "runtime/model/lora.h"
#include "runtime/model/rope.h"
#include "tests/counting_allocator.h"

namespace shardtune {
namespace {

// Bytes still alive after `fn` ran, of what it allocated, with what it returned kept.
template <class Fn>
int64_t kept_by(Fn&& fn) {
  testing_support::counting_allocator();
  const int64_t before = testing_support::CountingAllocator::live();
  const auto kept = fn();
  return testing_support::CountingAllocator::live() - before;
}

// What one block keeps (less its attention's own share) measured, and planned (less flash
// attention's own share), for a block of the tiny model in fp32; with `lora`, adapters of rank 4
// on every projection, their dropout 0.1, the base frozen.
struct Kept {
  double measured = 0, planned = 0;
};
Kept block_activations(bool lora) {
  model::Fusions fused;
  fused.host_reference = true;  // fp32 CPU tensors through the kernels' host references
  model::set_fusions(fused);

  model::LlamaConfig config = model::LlamaConfig::tiny();
  config.num_key_value_heads = config.num_attention_heads;  // k and v are not repeated on a GPU either
  config.num_hidden_layers = 1;
  model::LlamaForCausalLM m(config, at::TensorOptions().dtype(at::kFloat));
  model::init_weights(m, 7);
  const model::LoraSpec spec{4, 8.0, 0.1, {"all-linear"}};
  if (lora) model::add_lora(m, spec, 11);
  for (model::NamedParam& p : m.named_parameters())
    p.tensor->requires_grad_(!lora || model::is_adapter_parameter(p.name));
  const int64_t b = 2, t = 48, tokens = b * t;
  const model::RopeTables rope = model::rope_tables(model::rope_inv_freq(config),
                                                    at::arange(t, at::kLong).repeat({b, 1}), at::kFloat);
  const at::Tensor x = at::randn({b, t, config.hidden_size}).requires_grad_(true);
  const model::DropoutSeed dropout{lora, 5};
  const int64_t block = kept_by([&] { return m.layer(0).forward(x, rope, model::AttentionMask{}, dropout); });

  // The attention's own share: what it keeps of inputs it did not make, less its output, which
  // LibTorch 1.13's CPU attention does not keep for itself (its last product keeps the
  // probabilities and v): in the block it stays only while o_proj's weight trains. Flash attention
  // keeps its output, so on a GPU it stays whatever o_proj needs.
  const int64_t heads = config.num_attention_heads, dim = config.head_dim;
  const at::Tensor q = at::randn({b, heads, t, dim}).requires_grad_(true);
  const at::Tensor k = at::randn({b, heads, t, dim}).requires_grad_(true);
  const at::Tensor v = at::randn({b, heads, t, dim}).requires_grad_(true);
  const int64_t output = tokens * heads * dim * 4;
  const int64_t attention = kept_by([&] { return model::causal_attention(q, k, v); }) - output;
  const int64_t output_in_block = lora ? 0 : output;
  model::set_fusions(model::Fusions{});

  job::Job job;
  job.launch.device = job::Device::kCuda;
  job.train.mixed_precision = false;  // fp32, as measured here
  job.train.batch_size_training = b;
  job.train.context_length = t;
  job.train.batching_strategy = job::BatchingStrategy::kPadding;
  job.fsdp.activation_checkpointing = false;
  if (lora) {
    job.peft.method = job::PeftMethod::kLora;
    job.peft.lora_r = spec.r;
    job.peft.lora_alpha = spec.alpha;
    job.peft.lora_dropout = spec.dropout;
    job.peft.target_modules = spec.targets;
  }
  const launcher::MemoryPlan plan = launcher::plan_memory(job, config);
  EXPECT_TRUE(plan.cuda);
  EXPECT_EQ(plan.tokens_per_micro_batch, tokens);
  double planned = -1;
  for (const launcher::MemoryPart& part : plan.parts)
    if (part.name == "activations") planned = part.bytes;
  // Flash attention's own share in the plan: its output (fp32 here) and a log-sum-exp per head.
  const double flash = static_cast<double>(tokens) * (heads * dim * 4 + heads * 4);
  return {static_cast<double>(block - attention - output_in_block), planned - flash};
}

TEST(PlanActivations, AFusedBlockKeepsWhatThePlanCountsOnAGpu) {
  const Kept kept = block_activations(false);
  EXPECT_EQ(kept.measured, kept.planned);
}

TEST(PlanActivations, LoraAdaptersWithDropoutKeepWhatThePlanCounts) {
  const Kept kept = block_activations(true);
  EXPECT_EQ(kept.measured, kept.planned);
}

}  // namespace
}  // namespace shardtune
