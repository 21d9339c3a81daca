// Shard and replicate groups from MPI_Comm_split over the pure layout, each with its device backend.
#include "runtime/dist/process_groups.h"

#include "runtime/dist/device_communicator.h"
#include "runtime/dist/host_staged_communicator.h"
#include "runtime/dist/mpi_check.h"
#include "runtime/dist/watchdog.h"

#include <fmt/format.h>

namespace shardtune::dist {
namespace {

std::unique_ptr<Communicator> make_group(MPI_Comm comm, const char* name, const GroupOptions& options) {
  auto host = std::make_unique<MpiCommunicator>(comm, name, options.timeout_s);
  std::unique_ptr<Communicator> device;
  switch (options.device_collectives) {
    case DeviceCollectives::kNone: break;
    case DeviceCollectives::kNccl: device = make_nccl_communicator(*host, options.device, options.timeout_s); break;
    case DeviceCollectives::kHostStaged: device = std::make_unique<HostStagedCommunicator>(*host); break;
  }
  return std::make_unique<DeviceCommunicator>(std::move(host), std::move(device));
}

}  // namespace

ProcessGroups make_process_groups(MPI_Comm world, int shard_size, const GroupOptions& options) {
  int rank = 0, size = 0;
  ST_MPI_CHECK(MPI_Comm_rank(world, &rank));
  ST_MPI_CHECK(MPI_Comm_size(world, &size));
  GroupLayout layout(size, shard_size);

  MPI_Comm world_dup, shard, replicate;
  ST_MPI_CHECK(MPI_Comm_dup(world, &world_dup));
  // The key orders members by world rank, so the group rank is the layout's rank in the group.
  ST_MPI_CHECK(MPI_Comm_split(world, layout.shard_group_of(rank), rank, &shard));
  ST_MPI_CHECK(MPI_Comm_split(world, layout.replicate_group_of(rank), rank, &replicate));
  ProcessGroups groups{layout, nullptr, nullptr, nullptr};
  groups.world = make_group(world_dup, "world", options);
  groups.shard = make_group(shard, "shard", options);
  groups.replicate = make_group(replicate, "replicate", options);
  return groups;
}

std::string groups_failure(const ProcessGroups& groups) {
  for (const Communicator* c : {groups.world.get(), groups.shard.get(), groups.replicate.get()}) {
    if (c == nullptr) continue;
    const std::string why = c->failure();
    if (!why.empty()) return fmt::format("the {} group failed: {}", c->name(), why);
  }
  const std::string first = first_collective_failure();
  return first.empty() ? std::string() : fmt::format("a collective failed: {}", first);
}

ProcessGroups make_mpi_groups(MPI_Comm world, int shard_size, double timeout_s) {
  return make_process_groups(world, shard_size, GroupOptions{timeout_s, -1, DeviceCollectives::kNone});
}

}  // namespace shardtune::dist
