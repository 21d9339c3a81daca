// The streamed load's communicators and window: MpiCommunicators, so every wait is watched.
#include "runtime/dist/staging_group.h"

#include <ATen/ops/from_blob.h>
#include <ATen/ops/full.h>
#include <mpi.h>
#include <sys/statvfs.h>

#include <string>

#include "common/error.h"
#include "runtime/dist/device_communicator.h"
#include "runtime/dist/mpi_check.h"
#include "runtime/dist/mpi_communicator.h"

namespace shardtune::dist {
namespace {

using common::ErrorKind;

MpiCommunicator& mpi_of(Communicator& c) {
  if (auto* mpi = dynamic_cast<MpiCommunicator*>(&c)) return *mpi;
  if (auto* device = dynamic_cast<DeviceCommunicator*>(&c)) return device->host();
  common::raise(ErrorKind::kInternal, "loading needs a communicator over MPI, and '" + c.name() + "' is not");
}

}  // namespace

struct StagingGroup::Comms {
  std::unique_ptr<MpiCommunicator> node;
  std::unique_ptr<MpiCommunicator> own_group;  // null when the group is the node
  MpiCommunicator* group = nullptr;
  // Freed by close() only. Left by a failed load: freeing it would wait for every rank of the
  // node, one of which may be gone; the process ends with the error, the window with it.
  MPI_Win window = MPI_WIN_NULL;
};

StagingGroup::StagingGroup(Communicator& world_comm, const StagingOptions& options)
    : comms_(std::make_unique<Comms>()) {
  MpiCommunicator& world = mpi_of(world_comm);
  // Splitting is blocking in MPI: first every rank of the world has arrived, watched.
  world.barrier();
  MPI_Comm node = MPI_COMM_NULL;
  if (options.node >= 0) {
    ST_MPI_CHECK(MPI_Comm_split(world.comm(), options.node, world.rank(), &node));
  } else {
    ST_MPI_CHECK(MPI_Comm_split_type(world.comm(), MPI_COMM_TYPE_SHARED, world.rank(), MPI_INFO_NULL, &node));
  }
  comms_->node = std::make_unique<MpiCommunicator>(node, "node", world.timeout_s());
  if (options.reader_per_node) {
    comms_->group = comms_->node.get();
  } else {
    MPI_Comm group = MPI_COMM_NULL;
    ST_MPI_CHECK(MPI_Comm_dup(world.comm(), &group));
    comms_->own_group = std::make_unique<MpiCommunicator>(group, "loading", world.timeout_s());
    comms_->group = comms_->own_group.get();
  }
  rank_ = comms_->group->rank();
  size_ = comms_->group->size();
  at::Tensor leader = at::full({1}, world.rank(), at::kInt);  // the node's first rank is its lowest
  comms_->node->broadcast(leader, 0);
  node_id_ = leader.item<int>();
}

StagingGroup::~StagingGroup() = default;

std::vector<int32_t> StagingGroup::all_gather(const std::vector<int32_t>& mine) {
  std::vector<int32_t> all(mine.size() * static_cast<size_t>(size_));
  const at::Tensor in = at::from_blob(const_cast<int32_t*>(mine.data()), {static_cast<int64_t>(mine.size())}, at::kInt);
  at::Tensor out = at::from_blob(all.data(), {static_cast<int64_t>(all.size())}, at::kInt);
  comms_->group->all_gather(in, out);
  return all;
}

char* StagingGroup::share(int64_t bytes, bool on_reader_node) {
  ST_CHECK(comms_->window == MPI_WIN_NULL, ErrorKind::kInternal, "the staging window is made once");
  if (!on_reader_node) return nullptr;
  MpiCommunicator& node = *comms_->node;
  // The node's first rank checks /dev/shm; every rank of the node hears its verdict.
  at::Tensor free_bytes = at::full({1}, int64_t{-1}, at::kLong);  // -1: unknown
  struct statvfs fs {};
  if (node.rank() == 0 && ::statvfs("/dev/shm", &fs) == 0)
    free_bytes.fill_(static_cast<int64_t>(fs.f_bavail * fs.f_frsize));
  node.broadcast(free_bytes, 0);
  const int64_t free = free_bytes.item<int64_t>();
  ST_CHECK(free < 0 || free >= bytes, ErrorKind::kIo,
           "loading weights stages {:.0f} MiB in shared memory, but /dev/shm has only {:.0f} MiB free on this node",
           static_cast<double>(bytes) / (1 << 20), static_cast<double>(free) / (1 << 20));
  // Making a window is blocking: first every rank of the node has arrived, watched.
  node.barrier();
  char* mine = nullptr;
  ST_MPI_CHECK(MPI_Win_allocate_shared(reader() ? bytes : 0, 1, MPI_INFO_NULL, node.comm(), &mine, &comms_->window));
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

void StagingGroup::send(const char* data, int64_t bytes, int to) { comms_->group->send(data, bytes, to); }

void StagingGroup::receive_from_reader(char* data, int64_t bytes) { comms_->group->receive(data, bytes, 0); }

}  // namespace shardtune::dist
