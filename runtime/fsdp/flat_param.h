// One flat parameter: some of a unit's parameters (all trainable, or all frozen) laid end to end.
// Each rank keeps its shard (master dtype) and, when trainable, a gradient shard (fp32 or master
// dtype). For forward and backward the full buffer is gathered in the compute dtype; the model's
// parameter slots then hold views of it. Freeing keeps the buffer's storage object and drops its
// memory, so views saved by autograd stay valid once it is gathered again.
#pragma once

#include <ATen/core/Tensor.h>

#include <vector>

#include "runtime/dist/communicator.h"
#include "runtime/fsdp/fsdp_options.h"
#include "runtime/fsdp/shard_layout.h"

namespace shardtune::fsdp {

class FlatParam {
 public:
  // `slots` hold the parameters' current full values (identical on every rank of the shard
  // group); this rank's shard is copied out of them. Slots on the meta device give a zero shard
  // for a loader to fill. The slots are then emptied: until gathered, a slot holds an undefined
  // tensor.
  FlatParam(FlatLayout layout, std::vector<at::Tensor*> slots, bool trainable, const FsdpOptions& options,
            int shard_rank);

  const FlatLayout& layout() const { return layout_; }
  int shard_rank() const { return shard_rank_; }
  bool trainable() const { return trainable_; }
  at::Tensor& shard() { return shard_; }            // (shard_numel,) master dtype
  // (shard_numel,), allocated at first use (loading needs none); undefined when frozen.
  at::Tensor& grad_shard();

  // Makes the full buffer hold every parameter (compute dtype); collective over `shard_group`.
  void gather(dist::Communicator& shard_group);
  void reshard();
  bool gathered() const { return gathered_; }

  // Views of the full buffer, one per parameter, set into the slots. They are autograd leaves
  // (requiring grad when trainable) created at the first call after reset_leaves().
  const std::vector<at::Tensor>& leaves();
  void reset_leaves();

  // Adds a parameter's gradient (compute dtype) into the unsharded gradient buffer.
  void accumulate_grad(size_t param, const at::Tensor& grad);
  bool has_unreduced_grad() const { return full_grad_.defined(); }
  // Reduce-scatter of the unsharded gradient in the shard group, all-reduce across replicas,
  // both averaging; the result is added into grad_shard(). Frees the unsharded gradient.
  void reduce_grad(dist::Communicator& shard_group, dist::Communicator& replicate_group);

  // Bytes held between steps: shard, gradient shard, and the full buffer when it is kept.
  int64_t persistent_bytes() const;

 private:
  FlatLayout layout_;
  std::vector<at::Tensor*> slots_;
  bool trainable_;
  FsdpOptions options_;
  int shard_rank_;
  bool alias_full_to_shard_ = false;  // one shard of the same dtype: the shard is the full buffer
  at::Tensor shard_;
  at::Tensor grad_shard_;
  at::Tensor full_;  // (padded_numel,) compute dtype; its storage is dropped when resharded
  bool gathered_ = false;
  std::vector<at::Tensor> leaves_;
  at::Tensor full_grad_;  // (padded_numel,) reduce dtype, while gradients are unreduced
};

}  // namespace shardtune::fsdp
