// Shard and replicate groups from MPI_Comm_split over the pure layout, each with its device backend.
#include "runtime/dist/process_groups.h"

#include "runtime/dist/device_communicator.h"
#include "runtime/dist/host_staged_communicator.h"
#include "runtime/dist/mpi_check.h"
#include "runtime/dist/watchdog.h"

#include <fmt/format.h>

#include <utility>

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

  MPI_Comm world_dup;
  ST_MPI_CHECK(MPI_Comm_dup(world, &world_dup));
  ProcessGroups groups{layout, nullptr, nullptr, nullptr};
  groups.world = make_group(world_dup, "world", options);
  // A group of every rank is the world's communicator; the others split from it. The key orders
  // members by world rank, so the group rank is the layout's rank in the group.
  auto group = [&](int color, int group_size, const char* name) -> std::shared_ptr<Communicator> {
    if (group_size == size) return groups.world;
    MPI_Comm comm;
    ST_MPI_CHECK(MPI_Comm_split(world, color, rank, &comm));
    return make_group(comm, name, options);
  };
  groups.shard = group(layout.shard_group_of(rank), shard_size, "shard");
  groups.replicate = group(layout.replicate_group_of(rank), size / shard_size, "replicate");
  return groups;
}

std::string groups_failure(const ProcessGroups& groups) {
  const std::pair<const char*, const Communicator*> roles[] = {
      {"world", groups.world.get()}, {"shard", groups.shard.get()}, {"replicate", groups.replicate.get()}};
  for (const auto& [role, c] : roles) {
    if (c == nullptr) continue;
    const std::string why = c->failure();
    if (why.empty()) continue;
    // A communicator that serves several roles (a group of every rank is the world's) names them all.
    std::string names;
    for (const auto& [other, d] : roles)
      if (d == c) names += (names.empty() ? "" : "/") + std::string(other);
    return fmt::format("the {} group failed: {}", names, why);
  }
  const std::string first = first_collective_failure();
  return first.empty() ? std::string() : fmt::format("a collective failed: {}", first);
}

ProcessGroups make_mpi_groups(MPI_Comm world, int shard_size, double timeout_s) {
  return make_process_groups(world, shard_size, GroupOptions{timeout_s, -1, DeviceCollectives::kNone});
}

}  // namespace shardtune::dist
