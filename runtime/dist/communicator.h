// The collectives FSDP needs, over LibTorch tensors. Implementations: MpiCommunicator (CPU
// tensors) and NcclCommunicator (CUDA tensors, when LibTorch has CUDA). Every collective is
// watched: one that does not finish within the group's timeout throws on every waiting rank.
#pragma once

#include <ATen/core/Tensor.h>

#include <string>
#include <vector>

#include "runtime/dist/dist_types.h"

namespace shardtune::dist {

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  // The world rank of each member, in group-rank order.
  virtual const std::vector<int>& world_ranks() const = 0;
  // "world", "shard", "replicate": names this group in logs and timeout errors.
  virtual const std::string& name() const = 0;

  // output = concat over ranks of input; output.numel() == size() * input.numel(). The input may
  // be this rank's slot of the output (FSDP's shard inside its gathered buffer).
  virtual void all_gather(const at::Tensor& input, at::Tensor& output) = 0;
  // output = this rank's slot of reduce(inputs); input.numel() == size() * output.numel().
  virtual void reduce_scatter(const at::Tensor& input, at::Tensor& output, ReduceOp op) = 0;
  virtual void all_reduce(at::Tensor& tensor, ReduceOp op) = 0;
  virtual void broadcast(at::Tensor& tensor, int root) = 0;
  virtual void barrier() = 0;
};

// The communicator's element type for a tensor's dtype; throws for dtypes collectives do not carry.
DType dtype_of(const at::Tensor& t);

}  // namespace shardtune::dist
