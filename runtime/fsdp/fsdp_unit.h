// An FSDP unit: the parameters of one piece of the model (a block, the embedding, the head) in
// flat parameters, and the autograd function that runs the piece with them gathered:
//   forward:  gather → start the next unit's gather → run the piece → free (FULL_SHARD)
//   backward: gather again → start the previous unit's gather → the piece's own backward →
//             start reducing its gradients → move earlier units' reductions on → free
// The piece's autograd graph lives inside the unit, so these steps happen exactly at the unit's
// boundaries in both directions. With activation checkpointing the forward of a checkpointed piece
// (every block) keeps only the input and backward recomputes the piece. Gradient reductions still
// in flight when backward ends are finished by a callback at the end of the backward pass.
#pragma once

#include <ATen/core/Tensor.h>

#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "runtime/dist/communicator.h"
#include "runtime/fsdp/flat_param.h"
#include "runtime/fsdp/fsdp_options.h"

namespace shardtune::fsdp {

// Host time spent starting and waiting for FSDP's collectives (gathers and gradient reductions),
// for benchmarks and logs. On a GPU the waits are stream waits, so this is close to zero.
struct CommStats {
  double seconds = 0;
  int64_t calls = 0;
};

class FsdpUnit;

// The communicators, settings and schedule every unit of a model shares.
struct FsdpContext {
  dist::Communicator* shard_group = nullptr;
  dist::Communicator* replicate_group = nullptr;
  FsdpOptions options;
  bool sync_grads = true;  // false: keep unsharded gradients until a later micro-batch
  CommStats comm;
  std::vector<FsdpUnit*> order;        // the units in forward order, for prefetching
  std::deque<FlatParam*> reducing;     // flats whose gradient reduction is in flight, oldest first
  bool finish_queued = false;          // the end-of-backward callback is registered

  // Completes every gradient reduction in flight (collective, in the order they were started).
  void finish_reductions();
};

using PieceFn = std::function<at::Tensor(const at::Tensor&)>;

class FsdpUnit {
 public:
  FsdpUnit(std::string name, FsdpContext* context, size_t index)
      : name_(std::move(name)), context_(context), index_(index) {}

  const std::string& name() const { return name_; }
  std::vector<std::unique_ptr<FlatParam>>& flats() { return flats_; }
  // Flat parameters of other units this piece also uses (a tied head uses the embedding's).
  void add_dependency(FlatParam* flat) { deps_.push_back(flat); }

  // Runs `fn` on `input` with this unit's parameters gathered. Differentiable in `input` (when it
  // requires grad) and in the trainable parameters.
  at::Tensor run(const at::Tensor& input, PieceFn fn);

  // Starts gathering every flat parameter this piece uses (no-op for those gathered or started).
  void start_gather_all();

  // false: the piece's backward never reads its parameters (an embedding's reads the token ids
  // alone), so backward gathers none (nor prefetches them), and activation checkpointing keeps the
  // piece's output rather than recomputing it from gathered parameters.
  void set_backward_reads_params(bool reads) { backward_reads_params_ = reads; }
  bool backward_reads_params() const { return backward_reads_params_; }

  // false: activation checkpointing leaves this piece alone and it keeps its graph. For the head,
  // last in forward and first in backward: its backward follows its forward at once, so nothing
  // would use the memory a recomputation frees, and recomputing it would run its product with the
  // vocabulary, the step's largest, once more.
  void set_checkpointed(bool checkpointed) { checkpointed_ = checkpointed; }

  // Pieces of the autograd function (public for it; not for callers).
  at::Tensor forward_impl(const at::Tensor& input, PieceFn fn);
  at::Tensor backward_impl(const at::Tensor& grad_output);

 private:
  std::vector<FlatParam*> used_flats();
  void gather_all();
  void reshard_all();
  // Starts the gather of the unit at forward position `index`, if there is one and overlap is on.
  void prefetch(size_t index);
  // Whether backward recomputes the piece's forward (activation checkpointing, where it reads the
  // parameters) instead of keeping its graph from the forward.
  bool recomputes() const;
  void reduce_gradients();

  std::string name_;
  FsdpContext* context_;
  size_t index_;  // position in forward order
  std::vector<std::unique_ptr<FlatParam>> flats_;
  std::vector<FlatParam*> deps_;
  at::Tensor handle_;  // an empty tensor: the parameters' stand-in in the outer autograd graph
  bool backward_reads_params_ = true;
  bool checkpointed_ = true;

  // State of the current micro-batch between forward and backward.
  PieceFn fn_;
  at::Tensor saved_input_;   // the input (detached); with checkpointing the only thing kept
  bool input_requires_grad_ = false;
  at::Tensor input_leaf_;
  at::Tensor inner_output_;  // the piece's output inside the unit's own graph
};

}  // namespace shardtune::fsdp
