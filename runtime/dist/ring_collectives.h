// Reduce-scatter and all-reduce around a ring of point-to-point messages, for large CPU buffers.
// Open MPI's non-blocking reduce-scatter (libnbc) reduces the whole buffer onto rank 0 through two
// temporary copies of it: rank 0 briefly holds twice the largest unit's unsharded gradient (2 GiB
// more for Llama 3.2 1B's embedding in fp32) and receives log2(p) whole buffers. Around a ring
// every rank sends (p - 1) / p of the buffer and holds two pieces beyond the caller's buffers.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <functional>

namespace shardtune::dist {

struct RingOptions {
  MPI_Comm comm = MPI_COMM_NULL;
  int rank = 0, size = 1;
  MPI_Datatype type = MPI_DATATYPE_NULL;  // of one element
  MPI_Op op = MPI_OP_NULL;                // applied with MPI_Reduce_local: MPI's own arithmetic
  int64_t element_size = 4;
  int64_t piece_elements = int64_t{1} << 20;  // per message; two such pieces are received at once
  // The messages' tag, one per collective: ranks that run two rings in different orders then wait
  // for each other (and the watchdog names the mismatch) instead of reducing the wrong buffers.
  int tag = 0;
  // Waits for one request (under the caller's watchdog).
  std::function<void(MPI_Request&)> wait;
};

// `input` holds size x count elements (block b for rank b); `output` gets this rank's block of
// the reduction over ranks. The input is the ring's scratch: its contents are undefined after.
void ring_reduce_scatter(char* input, char* output, int64_t count, const RingOptions& options);

// `data` (count elements, any count) reduced over ranks, in place, on every rank.
void ring_all_reduce(char* data, int64_t count, const RingOptions& options);

}  // namespace shardtune::dist
