// GPU identities across ranks, by UUID.
#include "runtime/dist/gpu_sharing.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "runtime/dist/mpi_check.h"
#ifdef SHARDTUNE_HAVE_NCCL
#include "runtime/dist/cuda_check.h"
#endif

namespace shardtune::dist {

int visible_gpus() {
#ifdef SHARDTUNE_HAVE_NCCL
  return visible_gpu_count();
#else
  return 0;
#endif
}

bool every_rank_has_its_own_gpu(MPI_Comm world, int device) {
  std::array<unsigned char, 16> uuid{};  // all zero: no GPU
#ifdef SHARDTUNE_HAVE_NCCL
  if (device >= 0) {
    cudaDeviceProp prop{};
    ST_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
    std::copy_n(reinterpret_cast<const unsigned char*>(prop.uuid.bytes), uuid.size(), uuid.begin());
  }
#endif
  int size = 0;
  ST_MPI_CHECK(MPI_Comm_size(world, &size));
  std::vector<std::array<unsigned char, 16>> all(size);
  ST_MPI_CHECK(MPI_Allgather(uuid.data(), 16, MPI_UNSIGNED_CHAR, all.data(), 16, MPI_UNSIGNED_CHAR, world));
  const std::array<unsigned char, 16> none{};
  if (std::find(all.begin(), all.end(), none) != all.end()) return false;
  std::sort(all.begin(), all.end());
  return std::adjacent_find(all.begin(), all.end()) == all.end();
}

DeviceCollectives device_collectives_for(bool any_gpu, bool each_has_its_own, bool sharing_allowed) {
  if (!any_gpu) return DeviceCollectives::kNone;
  if (each_has_its_own) return DeviceCollectives::kNccl;
  ST_CHECK(sharing_allowed, common::ErrorKind::kConfig,
           "some ranks share a GPU (more ranks per node than GPUs, or CUDA_VISIBLE_DEVICES giving several ranks the "
           "same one), and NCCL needs a GPU per rank. HINT: one rank per GPU (ntasks_per_node = GPUs per node); to "
           "run the multi-rank GPU path on one GPU anyway (tests: collectives staged through host memory, slow), "
           "set SHARDTUNE_SHARE_GPUS=1");
  return DeviceCollectives::kHostStaged;
}

DeviceCollectives choose_device_collectives(MPI_Comm world, int device) {
  int any_gpu = device >= 0 ? 1 : 0;
  ST_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &any_gpu, 1, MPI_INT, MPI_MAX, world));
  const bool own = any_gpu != 0 && every_rank_has_its_own_gpu(world, device);
  const char* share = std::getenv("SHARDTUNE_SHARE_GPUS");
  const DeviceCollectives chosen =
      device_collectives_for(any_gpu != 0, own, share != nullptr && std::string_view(share) == "1");
  int rank = 0;
  ST_MPI_CHECK(MPI_Comm_rank(world, &rank));
  if (rank == 0 && chosen == DeviceCollectives::kHostStaged)
    spdlog::warn("some ranks share a GPU (SHARDTUNE_SHARE_GPUS=1): collectives on GPU tensors go through host "
                 "memory over MPI (slow; for running the multi-rank GPU path on one GPU)");
  return chosen;
}

}  // namespace shardtune::dist
