// Ring collectives over MPI point-to-point messages.
#include "runtime/dist/ring_collectives.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "runtime/dist/mpi_check.h"

namespace shardtune::dist {
namespace {

int mod(int a, int p) { return ((a % p) + p) % p; }

// One lap of the ring, p - 1 steps over the blocks [begin[b], begin[b + 1]). At step s this rank
// sends block (rank - s - shift) to the next rank and receives block (rank - s - shift - 1) from
// the previous one, which sent that block at the same step. `reduce`: the received pieces are
// reduced into the block (MPI_Reduce_local, the operator's own arithmetic), else written over it.
// With shift 1 and reduce, rank r ends with the whole reduction of block r; with shift 0 and
// copies, the block each rank completed goes round to every rank.
void lap(char* data, const std::vector<int64_t>& begin, int shift, bool reduce, const RingOptions& o) {
  const int p = o.size;
  const int next = (o.rank + 1) % p, prev = (o.rank + p - 1) % p;
  const int64_t es = o.element_size, piece = std::max<int64_t>(o.piece_elements, 1);
  std::vector<char> buffers[2];
  for (int s = 0; s < p - 1; ++s) {
    const int sb = mod(o.rank - s - shift, p), rb = mod(o.rank - s - shift - 1, p);
    const int64_t send_len = begin[sb + 1] - begin[sb], recv_len = begin[rb + 1] - begin[rb];
    auto length = [&](int64_t len, int64_t k) { return std::min(piece, len - k * piece); };
    const int64_t sends = (send_len + piece - 1) / piece, recvs = (recv_len + piece - 1) / piece;
    // The sent block does not change during the step (p >= 2: it is not the received one).
    std::vector<MPI_Request> sent(static_cast<size_t>(sends), MPI_REQUEST_NULL);
    for (int64_t k = 0; k < sends; ++k)
      ST_MPI_CHECK(MPI_Isend(data + (begin[sb] + k * piece) * es, static_cast<int>(length(send_len, k) * es), MPI_BYTE,
                             next, o.tag, o.comm, &sent[static_cast<size_t>(k)]));
    // Two pieces in flight: one arrives while the one before it is reduced.
    MPI_Request received[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
    auto target = [&](int64_t k) { return data + (begin[rb] + k * piece) * es; };
    auto post = [&](int64_t k) {
      if (k >= recvs) return;
      char* into = target(k);
      if (reduce) {
        std::vector<char>& b = buffers[k % 2];
        b.resize(static_cast<size_t>(std::min(piece, recv_len) * es));
        into = b.data();
      }
      ST_MPI_CHECK(MPI_Irecv(into, static_cast<int>(length(recv_len, k) * es), MPI_BYTE, prev, o.tag, o.comm,
                             &received[k % 2]));
    };
    post(0);
    post(1);
    for (int64_t k = 0; k < recvs; ++k) {
      o.wait(received[k % 2]);
      if (reduce)
        ST_MPI_CHECK(MPI_Reduce_local(buffers[k % 2].data(), target(k), static_cast<int>(length(recv_len, k)), o.type,
                                      o.op));
      post(k + 2);
    }
    for (MPI_Request& r : sent) o.wait(r);
  }
}

}  // namespace

void ring_reduce_scatter(char* input, char* output, int64_t count, const RingOptions& options) {
  std::vector<int64_t> begin(static_cast<size_t>(options.size) + 1);
  for (int b = 0; b <= options.size; ++b) begin[static_cast<size_t>(b)] = b * count;
  lap(input, begin, 1, true, options);
  std::memcpy(output, input + options.rank * count * options.element_size, static_cast<size_t>(count * options.element_size));
}

void ring_all_reduce(char* data, int64_t count, const RingOptions& options) {
  std::vector<int64_t> begin(static_cast<size_t>(options.size) + 1);
  for (int b = 0; b <= options.size; ++b) begin[static_cast<size_t>(b)] = b * count / options.size;
  lap(data, begin, 1, true, options);
  lap(data, begin, 0, false, options);
}

}  // namespace shardtune::dist
