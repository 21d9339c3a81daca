// The streamed load's communicators, window and messages, every wait watched.
#include "runtime/dist/staging_group.h"

#include <mpi.h>
#include <sys/statvfs.h>

#include <algorithm>
#include <string>
#include <string_view>

#include "common/error.h"
#include "runtime/dist/device_communicator.h"
#include "runtime/dist/mpi_check.h"
#include "runtime/dist/mpi_communicator.h"
#include "runtime/dist/watchdog.h"

namespace shardtune::dist {
namespace {

using common::ErrorKind;
constexpr int64_t kMessageBytes = int64_t(1) << 30;  // MPI counts are ints: send in pieces

MpiCommunicator& mpi_of(Communicator& c) {
  if (auto* mpi = dynamic_cast<MpiCommunicator*>(&c)) return *mpi;
  if (auto* device = dynamic_cast<DeviceCommunicator*>(&c)) return device->host();
  common::raise(ErrorKind::kInternal, "loading needs a communicator over MPI, and '" + c.name() + "' is not");
}

// A communicator of the load's own, with the watchdog its waits go through.
struct Watched {
  Watched(MPI_Comm c, const std::string& name, double timeout_s) : comm(c) {
    ST_MPI_CHECK(MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN));
    watchdog = std::make_unique<Watchdog>(comm, name, world_ranks_of(comm), timeout_s);
  }
  ~Watched() {
    watchdog.reset();
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Comm_free(&comm);  // local in Open MPI: waits for no other rank
  }
  Watched(const Watched&) = delete;
  Watched& operator=(const Watched&) = delete;

  // Waits for `request` without spinning (ranks waiting for their turn leave the cores to the
  // reader), for at most the timeout.
  void wait(MPI_Request& request, std::string_view op, uint64_t seq, int peer = -1) {
    watchdog->wait(
        [&] {
          int done = 0;
          ST_MPI_CHECK(MPI_Test(&request, &done, MPI_STATUS_IGNORE));
          return done != 0;
        },
        CollectiveDesc{op, seq, peer});
  }
  void barrier() {
    MPI_Request r;
    ST_MPI_CHECK(MPI_Ibarrier(comm, &r));
    wait(r, "barrier", ++seq);
  }
  int rank() const {
    int r = 0;
    ST_MPI_CHECK(MPI_Comm_rank(comm, &r));
    return r;
  }
  int size() const {
    int s = 0;
    ST_MPI_CHECK(MPI_Comm_size(comm, &s));
    return s;
  }

  MPI_Comm comm;
  std::unique_ptr<Watchdog> watchdog;
  uint64_t seq = 0;       // collectives
  uint64_t messages = 0;  // sends and receives
};

}  // namespace

struct StagingGroup::Comms {
  std::unique_ptr<Watched> node;
  std::unique_ptr<Watched> own_group;  // null when the group is the node
  Watched* group = nullptr;
  // Freed by close() only. Left by a failed load: freeing it would wait for every rank of the
  // node, one of which may be gone; the process ends with the error, the window with it.
  MPI_Win window = MPI_WIN_NULL;
};

StagingGroup::StagingGroup(Communicator& world_comm, const StagingOptions& options)
    : comms_(std::make_unique<Comms>()) {
  MpiCommunicator& world = mpi_of(world_comm);
  const double timeout_s = world.timeout_s();
  // Splitting is blocking in MPI: first every rank of the world has arrived, watched.
  world.barrier();
  MPI_Comm node = MPI_COMM_NULL, group = MPI_COMM_NULL;
  if (options.node >= 0) {
    ST_MPI_CHECK(MPI_Comm_split(world.comm(), options.node, world.rank(), &node));
  } else {
    ST_MPI_CHECK(MPI_Comm_split_type(world.comm(), MPI_COMM_TYPE_SHARED, world.rank(), MPI_INFO_NULL, &node));
  }
  comms_->node = std::make_unique<Watched>(node, "node", timeout_s);
  if (options.reader_per_node) {
    comms_->group = comms_->node.get();
  } else {
    ST_MPI_CHECK(MPI_Comm_dup(world.comm(), &group));
    comms_->own_group = std::make_unique<Watched>(group, "loading", timeout_s);
    comms_->group = comms_->own_group.get();
  }
  rank_ = comms_->group->rank();
  size_ = comms_->group->size();
  node_id_ = world.rank();
  MPI_Request r;
  ST_MPI_CHECK(MPI_Ibcast(&node_id_, 1, MPI_INT, 0, comms_->node->comm, &r));
  comms_->node->wait(r, "broadcast", ++comms_->node->seq);
}

StagingGroup::~StagingGroup() = default;

std::vector<int32_t> StagingGroup::all_gather(const std::vector<int32_t>& mine) {
  std::vector<int32_t> all(mine.size() * static_cast<size_t>(size_));
  MPI_Request r;
  ST_MPI_CHECK(MPI_Iallgather(mine.data(), static_cast<int>(mine.size()), MPI_INT32_T, all.data(),
                              static_cast<int>(mine.size()), MPI_INT32_T, comms_->group->comm, &r));
  comms_->group->wait(r, "all_gather", ++comms_->group->seq);
  return all;
}

char* StagingGroup::share(int64_t bytes, bool on_reader_node) {
  ST_CHECK(comms_->window == MPI_WIN_NULL, ErrorKind::kInternal, "the staging window is made once");
  if (!on_reader_node) return nullptr;
  Watched& node = *comms_->node;
  // The node's first rank checks /dev/shm; every rank of the node hears its verdict, watched.
  int64_t free_bytes = -1;  // -1: unknown
  if (node.rank() == 0) {
    struct statvfs fs {};
    if (::statvfs("/dev/shm", &fs) == 0) free_bytes = static_cast<int64_t>(fs.f_bavail * fs.f_frsize);
  }
  MPI_Request r;
  ST_MPI_CHECK(MPI_Ibcast(&free_bytes, 1, MPI_INT64_T, 0, node.comm, &r));
  node.wait(r, "broadcast", ++node.seq);
  ST_CHECK(free_bytes < 0 || free_bytes >= bytes, ErrorKind::kIo,
           "loading weights stages {:.0f} MiB in shared memory, but /dev/shm has only {:.0f} MiB free on this node",
           static_cast<double>(bytes) / (1 << 20), static_cast<double>(free_bytes) / (1 << 20));
  // Making a window is blocking: first every rank of the node has arrived, watched.
  node.barrier();
  char* mine = nullptr;
  ST_MPI_CHECK(MPI_Win_allocate_shared(reader() ? bytes : 0, 1, MPI_INFO_NULL, node.comm, &mine, &comms_->window));
  MPI_Aint size = 0;
  int unit = 0;
  char* base = nullptr;
  ST_MPI_CHECK(MPI_Win_shared_query(comms_->window, 0, &size, &unit, &base));
  return base;
}

void StagingGroup::node_barrier() { comms_->node->barrier(); }

void StagingGroup::close() {
  if (comms_->window == MPI_WIN_NULL) return;
  comms_->node->barrier();
  ST_MPI_CHECK(MPI_Win_free(&comms_->window));
}

void StagingGroup::send(const char* data, int64_t bytes, int to) {
  Watched& g = *comms_->group;
  for (int64_t done = 0; done < bytes; done += kMessageBytes) {
    MPI_Request r;
    ST_MPI_CHECK(MPI_Isend(data + done, static_cast<int>(std::min(kMessageBytes, bytes - done)), MPI_BYTE, to, 0,
                           g.comm, &r));
    g.wait(r, "send", ++g.messages, to);
  }
}

void StagingGroup::receive_from_reader(char* data, int64_t bytes) {
  Watched& g = *comms_->group;
  for (int64_t done = 0; done < bytes; done += kMessageBytes) {
    MPI_Request r;
    ST_MPI_CHECK(MPI_Irecv(data + done, static_cast<int>(std::min(kMessageBytes, bytes - done)), MPI_BYTE, 0, 0,
                           g.comm, &r));
    g.wait(r, "receive", ++g.messages, 0);
  }
}

}  // namespace shardtune::dist
