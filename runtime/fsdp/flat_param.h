// One flat parameter: some of a unit's parameters (all trainable, or all frozen) laid end to end.
// Each rank keeps its shard (master dtype; frozen ones in the policy's frozen dtype) on its device
// and, when trainable, a gradient shard; offloaded (FsdpOptions::cpu_offload), both in host memory.
// For forward and backward the full buffer is gathered in the compute dtype; the model's
// parameter slots then hold views of it. Freeing keeps the buffer's storage object and drops its
// memory, so views saved by autograd stay valid once it is gathered again.
//
// Gathers and gradient reductions are split into a start and a finish so that FSDP can overlap
// them with computation: the next unit's all-gather runs while this one computes, and a unit's
// reduce-scatter (then, under HSDP, its all-reduce across replicas) while earlier units run
// their backward.
#pragma once

#include <ATen/core/Tensor.h>

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "runtime/dist/communicator.h"
#include "runtime/dist/device.h"
#include "runtime/fsdp/fsdp_options.h"
#include "runtime/fsdp/shard_layout.h"
#include "runtime/quant/nf4.h"

namespace shardtune::fsdp {

class FlatParam {
 public:
  // `slots` hold the parameters' current full values (identical on every rank of the shard
  // group, on any device); this rank's shard is copied out of them onto options.device. Slots on
  // the meta device give a zero shard for a loader to fill. The slots are then emptied: until
  // gathered, a slot holds an undefined tensor.
  //
  // `nf4` (frozen flats only; the layout aligned to its records): the shard holds NF4 records
  // (runtime/quant/nf4.h) instead of values, the all-gather moves them packed, and gathering
  // dequantises them into the full buffer (compute dtype).
  FlatParam(FlatLayout layout, std::vector<at::Tensor*> slots, bool trainable, const FsdpOptions& options,
            int shard_rank, std::optional<quant::Nf4Format> nf4 = std::nullopt);

  const FlatLayout& layout() const { return layout_; }
  // layout().blocks(block), made at the first call (for the scales of an 8-bit optimizer's state).
  const FlatLayout& block_layout(int64_t block) const;
  int shard_rank() const { return shard_rank_; }
  bool trainable() const { return trainable_; }
  // (shard_numel,) master (or frozen) dtype, on the device (offloaded: the host); NF4: uint8 records.
  at::Tensor& shard() { return shard_; }
  bool offloaded() const { return offloaded_; }
  const std::optional<quant::Nf4Format>& nf4() const { return nf4_; }

  // Loading. A loader writes this rank's part of every parameter into load_target(): the shard,
  // or for NF4 a staging buffer of values on the host (shard_numel, the frozen dtype), which
  // loaded() quantises once the flat is complete (per-block scales; the staging is freed).
  // finish_quantization (collective over the shard group, after every flat has loaded) gives
  // each NF4 tensor its offset from all of its blocks and double-quantises the scales.
  at::Tensor& load_target();
  void loaded();
  void finish_quantization(dist::Communicator& shard_group);
  // NF4 weights stored in NF4 already: `read(name, first, count, out)` writes that parameter's
  // records [first, first + count) to `out` (host); called for this rank's records only.
  using RecordReader = std::function<void(const std::string&, int64_t, int64_t, uint8_t*)>;
  void load_records(const RecordReader& read);
  // (shard_numel,), allocated at first use (loading needs none); undefined when frozen. Throws
  // while a gradient reduction into it is still in flight. Settles a pending zero_grad first.
  at::Tensor& grad_shard();
  // The gradient shard as zero, without a pass over it: the next gradients are copied in where
  // they would have been added to zeros (a parameter's first gradient on a rank alone, a whole
  // reduced shard), and settle_grad zeroes what none reached. FsdpLlama::finish_grad_sync settles
  // every flat after each backward, before an optimizer reads the shard it holds.
  void zero_grad();
  void settle_grad();

  // Makes the full buffer hold every parameter (compute dtype); collective over `shard_group`.
  // start_gather only starts the all-gather (no-op when started, or when gathered from the shard
  // as it is now); finish_gather waits for it. Code that writes the shard through its raw data
  // (loaders) calls reshard() afterwards, so that a kept copy is not taken for current.
  void start_gather(dist::Communicator& shard_group);
  void finish_gather();
  void gather(dist::Communicator& shard_group) {
    start_gather(shard_group);
    finish_gather();
  }
  void reshard();
  bool gathered() const { return gathered_; }

  // Views of the full buffer, one per parameter, set into the slots. They are autograd leaves
  // (requiring grad when trainable) created at the first call after reset_leaves().
  const std::vector<at::Tensor>& leaves();
  void reset_leaves();

  // Adds a parameter's gradient (compute dtype) into the unsharded gradient buffer. `unreduced`
  // false says the gradient needs no reduction (a shard group of one rank without replicas): it is
  // then added straight into grad_shard(), which is the whole buffer, where the reduction would
  // only move it there. No unsharded buffer is made, nor a pass to add it in. This holds where the
  // gradient shard is on the device and of the reduce dtype (where offloaded, or reduced in
  // another dtype, the gradient still goes through the buffer, as the reduction would round it).
  void accumulate_grad(size_t param, const at::Tensor& grad, bool unreduced = true);
  bool has_unreduced_grad() const { return full_grad_.defined(); }

  // The gradient reduction, in stages: reduce-scatter of the unsharded gradient in the shard
  // group, then all-reduce across replicas (HSDP), both averaging; the result is added into
  // grad_shard(). start_reduce frees the unsharded gradient once the reduce-scatter is done with
  // it. advance_reduce waits for the stage in flight and starts the next; it returns true once
  // the gradient is in grad_shard() or, offloaded, on its way down to the host: land_grad adds it
  // there.
  void start_reduce(dist::Communicator& shard_group);
  bool advance_reduce(dist::Communicator& replicate_group);
  bool reducing() const { return reduced_.defined(); }
  // Offloaded: the reduced gradient's copy down to host memory (pinned, from a GPU) is queued
  // without the host waiting, so that backward goes on meanwhile; land_grad waits for the device
  // and adds it into grad_shard(). FSDP lands every flat once its reductions are finished; reading
  // grad_shard() lands it too. No-op when nothing is on its way.
  void land_grad();
  void reduce_grad(dist::Communicator& shard_group, dist::Communicator& replicate_group) {
    start_reduce(shard_group);
    while (!advance_reduce(replicate_group)) {
    }
  }

  // Bytes held on the device between steps: shard and gradient shard (unless offloaded), and the
  // full buffer when it is kept.
  int64_t persistent_bytes() const;

  // Bytes this rank has handed to collectives over groups of more than one rank, since
  // construction: all-gather outputs (parameters) and gradient reduction inputs (reduce-scatter,
  // then the all-reduce across replicas).
  struct WireBytes {
    int64_t gathered = 0;
    int64_t reduced = 0;
  };
  const WireBytes& wire_bytes() const { return wire_; }

 private:
  // The gradient shard, allocated (zero) where it was not, not settled.
  at::Tensor& grad_buffer();
  // `t` where the shard lives: on the device, or in host memory (pinned for a GPU) when offloaded.
  at::Tensor to_home(const at::Tensor& t) const;

  FlatLayout layout_;
  mutable std::optional<FlatLayout> block_layout_;
  std::vector<at::Tensor*> slots_;
  bool trainable_;
  FsdpOptions options_;
  int shard_rank_;
  bool offloaded_ = false;  // the shard and gradient shard in host memory
  bool alias_full_to_shard_ = false;  // one shard of the same dtype: the shard is the full buffer
  at::Tensor shard_;
  at::Tensor grad_shard_;
  bool grad_zero_pending_ = false;       // grad_shard_ is zero where shard_grad_written_ says not written
  std::vector<bool> shard_grad_written_;  // per parameter, since zero_grad (a rank alone: shard = buffer)
  at::Tensor full_;  // (padded_numel,) compute dtype; its storage is dropped when resharded
  bool gathered_ = false;
  int64_t gathered_version_ = 0;  // the shard's version (in-place updates) when last gathered
  dist::WorkHandle gather_work_;  // the all-gather into full_, while in flight
  dist::CopyStreamScope::Mark copied_;  // offloaded on a GPU: the copy up, which finish_gather waits for
  std::vector<at::Tensor> leaves_;
  at::Tensor full_grad_;  // (padded_numel,) reduce dtype, while gradients are unreduced
  std::vector<bool> grad_written_;  // per parameter: full_grad_ holds a gradient of it
  at::Tensor reduced_;    // (shard_numel,) reduce dtype, this rank's part from the reduction's start to its end
  dist::WorkHandle reduce_work_;
  bool all_reducing_ = false;  // reduce_work_ is the all-reduce across replicas
  at::Tensor landing_;         // offloaded: the reduced gradient in host memory, not yet in grad_shard_
  WireBytes wire_;
  // NF4 storage.
  std::optional<quant::Nf4Format> nf4_;
  at::Tensor packed_full_;             // every shard's records, while gathered from other ranks
  at::Tensor device_records_;          // offloaded: this shard's records on the device, while gathered
  at::Tensor staging_;                 // values being loaded (host)
  bool provisional_ = false;           // records with fp32 scales until finish_quantization
  bool dequantize_pending_ = false;    // gathering: the records still to be dequantised
  std::vector<quant::ExactSum> sums_;  // per parameter: this rank's block maxima, while provisional
  std::string load_error_;             // why loaded() could not quantise, raised by finish_quantization
};

}  // namespace shardtune::fsdp
