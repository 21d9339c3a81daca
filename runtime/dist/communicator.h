// The collectives that training and checkpointing use, over LibTorch tensors, behind one
// interface. Implementations: MpiCommunicator (CPU tensors), NcclCommunicator (CUDA tensors, own
// stream, ordered with events), HostStagedCommunicator (device tensors staged through host memory
// over MPI, for several ranks on one GPU) and DeviceCommunicator, which picks one of them by the
// tensors' device. Every collective is watched: one that does not finish within the group's
// timeout fails every waiting rank with an error naming the ranks that never arrived.
#pragma once

#include <ATen/core/Tensor.h>

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "runtime/dist/dist_types.h"

namespace shardtune::dist {

// A collective in flight. It keeps its tensors alive until wait() has returned.
class Work {
 public:
  virtual ~Work() = default;
  // After wait(), what the caller runs next on the tensors' device sees the result: on the CPU
  // the data is there; on a GPU the current stream is ordered after the collective, without
  // blocking the host. Throws on an error or a timeout.
  virtual void wait() = 0;
};
using WorkHandle = std::unique_ptr<Work>;

// A Work that is already complete (collectives that ran eagerly).
class DoneWork final : public Work {
 public:
  void wait() override {}
};

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  // The world rank of each member, in group-rank order.
  virtual const std::vector<int>& world_ranks() const = 0;
  // "world", "shard", "replicate": names this group in logs and timeout errors.
  virtual const std::string& name() const = 0;

  // Non-blocking starts. Every rank of the group must start the same collectives in the same
  // order; the buffers must not be touched until the returned Work has been waited for.

  // output = concat over ranks of input; output.numel() == size() * input.numel(). The input may
  // be this rank's slot of the output (FSDP's shard inside its gathered buffer).
  [[nodiscard]] virtual WorkHandle start_all_gather(const at::Tensor& input, at::Tensor& output) = 0;
  // output = this rank's slot of reduce(inputs); input.numel() == size() * output.numel(). The
  // input is left undefined: an implementation may reduce in it rather than in a copy.
  [[nodiscard]] virtual WorkHandle start_reduce_scatter(const at::Tensor& input, at::Tensor& output, ReduceOp op) = 0;
  [[nodiscard]] virtual WorkHandle start_all_reduce(at::Tensor& tensor, ReduceOp op) = 0;

  // Blocking collectives (in the sense of Work::wait).
  virtual void broadcast(at::Tensor& tensor, int root) = 0;
  // Every rank's `input` (the same number of elements on each) into `output` on `root`, in rank
  // order; elsewhere `output` is not touched and may be undefined. Full checkpoints gather whole
  // units to their one writer with it, so the other ranks neither receive nor hold them.
  virtual void gather(const at::Tensor& input, at::Tensor& output, int root) = 0;
  // Every rank of the group has arrived; the host waits.
  virtual void barrier() = 0;

  // Why this group can no longer be trusted, "" while it can: it was marked failed (a collective
  // of it failed or timed out), or its backend reports an error of its own (NCCL's asynchronous
  // errors). The trainer checks every group after the step's host synchronisation and before the
  // optimizer step, and a save before it commits: a failed group's partial sums never update the
  // weights nor reach a checkpoint.
  std::string failure() const;
  // Marks the group failed: every later failure() says `why` (the first reason stays).
  void mark_failed(const std::string& why);

  void all_gather(const at::Tensor& input, at::Tensor& output) { start_all_gather(input, output)->wait(); }
  void reduce_scatter(const at::Tensor& input, at::Tensor& output, ReduceOp op) {
    start_reduce_scatter(input, output, op)->wait();
  }
  void all_reduce(at::Tensor& tensor, ReduceOp op) { start_all_reduce(tensor, op)->wait(); }

 protected:
  virtual std::string backend_failure() const { return {}; }

 private:
  mutable std::mutex failure_mutex_;
  std::string marked_;
};

// The communicator's element type for a tensor's dtype; throws for dtypes collectives do not carry.
common::Dtype dtype_of(const at::Tensor& t);

// Shape checks shared by every implementation; each throws common::Error(kInternal) naming the group.
void check_all_gather_sizes(const Communicator& c, const at::Tensor& input, const at::Tensor& output);
void check_reduce_scatter_sizes(const Communicator& c, const at::Tensor& input, const at::Tensor& output);
void check_gather_sizes(const Communicator& c, const at::Tensor& input, const at::Tensor& output, int root);
void check_root(const Communicator& c, int root, std::string_view op);

}  // namespace shardtune::dist
