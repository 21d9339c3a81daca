// FSDP applied to the Llama model from outside: one unit for the embedding, one per decoder
// block, one for the final norm and head (which, with tied embeddings, also uses the embedding
// unit's weight). Also the sharded-training helpers around it: gradient clipping by the global
// norm, zeroing gradients, and gathering full parameters for inspection.
#pragma once

#include <ATen/core/Tensor.h>

#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "runtime/dist/process_groups.h"
#include "runtime/fsdp/fsdp_unit.h"
#include "runtime/model/llama.h"

namespace shardtune::fsdp {

class FsdpLlama {
 public:
  // The model's parameters must hold their full values, identical on every rank; each rank keeps
  // only its shards and the full tensors are released. `frozen` names parameters that get no
  // gradient and no optimizer state.
  FsdpLlama(model::LlamaForCausalLM& model, dist::ProcessGroups& groups, const FsdpOptions& options,
            const std::set<std::string>& frozen = {});

  // Logits (B, T, vocab) in the compute dtype, on the model's device; backward through them
  // reduces the gradients. The ids and positions may be on the CPU (they are moved), and
  // preferably are: the documents of packed rows are read from the positions on the host.
  // `dropout`: the pass's LoRA dropout (disabled: none), also used when a unit recomputes.
  at::Tensor forward(const at::Tensor& input_ids, const at::Tensor& position_ids = {},
                     const model::DropoutSeed& dropout = {});
  // The batch's mean loss against labels (B, T) (model::causal_lm_loss of forward's logits; the
  // labels may be on the CPU), the logits never kept: LlamaForCausalLM::head_loss.
  at::Tensor forward_loss(const at::Tensor& input_ids, const at::Tensor& position_ids, const at::Tensor& labels,
                          const model::DropoutSeed& dropout = {});

  // Each token's loss (B, T) against labels (LlamaForCausalLM::head_token_losses), fp32 on the
  // model's device: minus a row's sum is the log-probability of its labelled tokens.
  at::Tensor forward_token_losses(const at::Tensor& input_ids, const at::Tensor& position_ids, const at::Tensor& labels,
                                  const model::DropoutSeed& dropout = {});

  // false: gradients of the coming backward stay unsharded and local (an accumulation
  // micro-batch); the next backward with true reduces everything accumulated.
  void set_sync_grads(bool sync) { context_.sync_grads = sync; }

  // Completes the gradient reductions still in flight (backward does it by itself when it ends),
  // and settles each gradient shard (FlatParam::settle_grad). Call it after every backward
  // before an optimizer that holds the gradient shards steps (train_step does).
  void finish_grad_sync();

  // After a loader has filled every shard: NF4 flats give each tensor its offset from all of its
  // blocks (collective over the shard group; FlatParam::finish_quantization).
  void finish_loading();

  // Every flat parameter (trainable and frozen), for the optimizer and for checkpoints.
  std::vector<FlatParam*> flat_params();

  // The global norm of the gradients over all ranks (collective over the shard group; the host
  // waits for it). grad_norm_squared: its square, fp64 (1,) on the device, not read.
  double grad_norm();
  at::Tensor grad_norm_squared();
  // torch.nn.utils.clip_grad_norm_'s factor for gradients of global norm `norm`: max_norm /
  // (norm + 1e-6) where that is below 1, else 1. The optimizer applies it (Optimizer::step's
  // grad_scale) in its own pass over the gradients.
  static double clip_coefficient(double norm, double max_norm);
  void zero_grad();

  // Full parameters by Hugging Face name, on the host (collective; for tests and inspection).
  std::map<std::string, at::Tensor> gather_full_parameters();

  int64_t persistent_bytes();
  // Bytes this rank has handed to collectives since construction, over every flat parameter.
  FlatParam::WireBytes wire_bytes();
  // Time in gathers and gradient reductions since construction.
  const CommStats& comm_stats() const { return context_.comm; }
  const FsdpOptions& options() const { return context_.options; }
  dist::ProcessGroups& groups() { return groups_; }
  const at::Device& device() const { return context_.options.device; }
  // Padding elements added so that every flat parameter divides evenly (summed over units).
  int64_t padding_elements() const { return padding_; }

 private:
  // The embedding and the blocks: the hidden state the head takes, and the batch's dropout.
  at::Tensor hidden(const at::Tensor& input_ids, const at::Tensor& position_ids, const model::DropoutSeed& dropout);

  model::LlamaForCausalLM& model_;
  dist::ProcessGroups& groups_;
  FsdpContext context_;
  std::unique_ptr<FsdpUnit> embed_;
  std::vector<std::unique_ptr<FsdpUnit>> blocks_;
  std::unique_ptr<FsdpUnit> head_;
  int64_t padding_ = 0;
};

}  // namespace shardtune::fsdp
