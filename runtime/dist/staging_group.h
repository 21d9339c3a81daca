// The traffic of a streamed load (fsdp/shard_loader.h): a reader serves a group of ranks; those
// on its node take their parts from a staging window in shared memory, the others receive them as
// messages. Every wait is bounded by the world's collective timeout through a watchdog, so a rank
// lost while the weights load (dead, or hung in the file system) fails the others with an error
// naming it, instead of hanging the job. The calls that MPI only offers blocking (splitting a
// communicator, making a shared window) each come right after a watched barrier of the ranks
// they involve, so a rank that never arrives is named there.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

namespace shardtune::dist {

class Communicator;

struct StagingOptions {
  bool reader_per_node = true;  // false: world rank 0 reads for every rank
  // Ranks that pass the same number here form a node (they share memory); -1: the ranks of this
  // host. Tests make nodes of ranks on one host.
  int node = -1;
};

class StagingGroup {
 public:
  // Collective over `world` (an MPI communicator, or a device one over MPI), with its timeout.
  StagingGroup(Communicator& world, const StagingOptions& options);
  ~StagingGroup();
  StagingGroup(const StagingGroup&) = delete;
  StagingGroup& operator=(const StagingGroup&) = delete;

  // This rank in its reader's group (the reader is 0), and the group's size.
  int rank() const { return rank_; }
  int size() const { return size_; }
  bool reader() const { return rank_ == 0; }
  // This rank's node, named by its lowest world rank.
  int node_id() const { return node_id_; }

  // Collective over the group: every member's `mine` (the same count on each), in group order.
  std::vector<int32_t> all_gather(const std::vector<int32_t>& mine);

  // Collective over the node: `bytes` of memory the node's ranks share, allocated on the reader's
  // node (`on_reader_node` the same on every rank of a node; elsewhere nothing is allocated and
  // null returned). Refused, on every rank of the node, when /dev/shm cannot hold it: a shared
  // window larger than it would fault with SIGBUS at first touch instead. Once per group.
  char* share(int64_t bytes, bool on_reader_node);

  // Every rank of the node has arrived.
  void node_barrier();
  // Collective over the node, once the load is done: the window freed, after every rank of the
  // node has arrived (freeing waits for them). Not called on the way out of a failed load.
  void close();

  // Messages within the group: `bytes` to member `to`; from the reader.
  void send(const char* data, int64_t bytes, int to);
  void receive_from_reader(char* data, int64_t bytes);

 private:
  struct Comms;  // the MPI communicators, window and watchdogs
  std::unique_ptr<Comms> comms_;
  int rank_ = 0;
  int size_ = 1;
  int node_id_ = 0;
};

}  // namespace shardtune::dist
