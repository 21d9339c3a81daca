// Replicas that need the same shard read it once between them: under HSDP (and NO_SHARD) the
// ranks of a replicate group hold the same shard, so each reads (weights from a model folder,
// state from a checkpoint) or writes (a checkpoint) only its part of it, and share_parts gives
// every rank the parts the others read, over the network (the parts: shard_layout.h, replica_part).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

#include "runtime/dist/communicator.h"
#include "runtime/fsdp/shard_layout.h"

namespace shardtune::fsdp {

// Collective over `replicas` (ranks holding the same shard, of the same numel, dtype and device
// on each): every rank has filled replica_part(numel, replicas.size(), replicas.rank(), align) of
// `shard`; afterwards every rank holds every part. Moves at most `chunk` elements a rank at a time
// (the temporary memory is (replicas + 1) x chunk elements). A group of one does nothing.
void share_parts(at::Tensor& shard, dist::Communicator& replicas, int64_t align = 1,
                 int64_t chunk = int64_t(1) << 22);

}  // namespace shardtune::fsdp
