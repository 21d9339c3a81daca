// Topology discovery from MPI.
#include "runtime/dist/topology.h"

#include <fmt/format.h>
#include <unistd.h>

#include <array>
#include <cstdlib>

#include "common/error.h"
#include "runtime/dist/mpi_check.h"

namespace shardtune::dist {

Topology discover_topology(MPI_Comm world) {
  Topology t;
  ST_MPI_CHECK(MPI_Comm_rank(world, &t.rank));
  ST_MPI_CHECK(MPI_Comm_size(world, &t.world_size));

  MPI_Comm node_comm = MPI_COMM_NULL;
  ST_MPI_CHECK(MPI_Comm_split_type(world, MPI_COMM_TYPE_SHARED, t.rank, MPI_INFO_NULL, &node_comm));
  ST_MPI_CHECK(MPI_Comm_rank(node_comm, &t.local_rank));
  ST_MPI_CHECK(MPI_Comm_size(node_comm, &t.local_size));

  // Node index: number the nodes' leaders (local rank 0) in world-rank order, then tell the node.
  MPI_Comm leaders = MPI_COMM_NULL;
  ST_MPI_CHECK(MPI_Comm_split(world, t.local_rank == 0 ? 0 : MPI_UNDEFINED, t.rank, &leaders));
  if (leaders != MPI_COMM_NULL) {
    ST_MPI_CHECK(MPI_Comm_rank(leaders, &t.node));
    ST_MPI_CHECK(MPI_Comm_free(&leaders));
  }
  ST_MPI_CHECK(MPI_Bcast(&t.node, 1, MPI_INT, 0, node_comm));
  int min_local = 0, max_local = 0;
  ST_MPI_CHECK(MPI_Allreduce(&t.local_size, &min_local, 1, MPI_INT, MPI_MIN, world));
  ST_MPI_CHECK(MPI_Allreduce(&t.local_size, &max_local, 1, MPI_INT, MPI_MAX, world));
  t.uniform = min_local == max_local;
  int is_leader = t.local_rank == 0 ? 1 : 0;
  ST_MPI_CHECK(MPI_Allreduce(&is_leader, &t.num_nodes, 1, MPI_INT, MPI_SUM, world));
  ST_MPI_CHECK(MPI_Comm_free(&node_comm));

  std::array<char, 256> host{};
  gethostname(host.data(), host.size() - 1);
  t.host = host.data();

  // Every rank's hostname, node index and local rank; the nodes' hostnames come from their leaders.
  struct Record {
    std::array<char, 256> host;
    int node, local_rank;
  };
  Record mine{host, t.node, t.local_rank};
  std::vector<Record> all(static_cast<size_t>(t.world_size));
  ST_MPI_CHECK(MPI_Allgather(&mine, sizeof(Record), MPI_BYTE, all.data(), sizeof(Record), MPI_BYTE, world));
  t.node_hosts.assign(static_cast<size_t>(t.num_nodes), std::string());
  for (const Record& r : all) t.rank_nodes.push_back(r.node);
  for (const Record& r : all)
    if (r.local_rank == 0 && r.node >= 0 && r.node < t.num_nodes) t.node_hosts[static_cast<size_t>(r.node)] = r.host.data();
  return t;
}

int launcher_local_rank(int fallback, const std::function<const char*(const char*)>& getenv) {
  // mpirun's numbering first: ranks that mpirun starts inside a Slurm allocation inherit the
  // SLURM_LOCALID of the step that started mpirun's daemon (0 on every rank).
  for (const char* name : {"OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID"}) {
    const char* value = getenv(name);
    if (value == nullptr || *value == '\0') continue;
    char* end = nullptr;
    const long v = std::strtol(value, &end, 10);
    if (*end == '\0' && v >= 0 && v < 1 << 20) return static_cast<int>(v);
  }
  return fallback;
}

DeviceChoice choose_device(DeviceRequest request, int local_rank, int local_size, int visible_gpus, bool cuda_build) {
  if (request == DeviceRequest::kCpu) return {-1, "[launch] device = \"cpu\": training on the CPU"};
  if (visible_gpus <= 0) {
    if (request == DeviceRequest::kAuto) return {-1, "no GPU visible: training on the CPU"};
    common::raise(common::ErrorKind::kConfig,
                  "[launch] device = \"cuda\" but this rank sees no GPU. HINT: check nvidia-smi on the node, "
                  "CUDA_VISIBLE_DEVICES, and that the job asks Slurm for GPUs ([slurm] gpus_per_node); set "
                  "device = \"cpu\" to train on the CPU");
  }
  if (!cuda_build) {
    common::raise(common::ErrorKind::kConfig,
                  fmt::format("{} GPU(s) visible but this shardtune was built with a LibTorch without CUDA, so it "
                              "cannot train on them{}. HINT: rebuild against a CUDA LibTorch "
                              "(SHARDTUNE_CMAKE_ARGS=\"-DTorch_DIR=...\" scripts/setup.sh), or set [launch] device = "
                              "\"cpu\"",
                              visible_gpus, request == DeviceRequest::kAuto ? " (device = \"auto\")" : ""));
  }
  if (visible_gpus == 1) return {0, "one GPU visible to this task: device 0"};
  if (visible_gpus >= local_size)
    return {local_rank, fmt::format("{} GPUs visible to {} local ranks: device = local rank {}", visible_gpus,
                                    local_size, local_rank)};
  common::raise(common::ErrorKind::kConfig,
                fmt::format("{} ranks run on this node but only {} GPUs are visible to each: shardtune runs one "
                            "rank per GPU. HINT: set [slurm] ntasks_per_node = gpus_per_node, or check "
                            "CUDA_VISIBLE_DEVICES",
                            local_size, visible_gpus));
}

}  // namespace shardtune::dist
