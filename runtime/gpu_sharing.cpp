// GPU identities across ranks, by UUID.
#include "runtime/gpu_sharing.h"

#include <algorithm>
#include <array>
#include <vector>

#include "runtime/dist/cuda_check.h"
#include "runtime/dist/mpi_check.h"

namespace shardtune::runtime {

bool every_rank_has_its_own_gpu(MPI_Comm world, int device) {
  std::array<unsigned char, 16> uuid{};  // all zero: no GPU
  if (device >= 0) {
    cudaDeviceProp prop{};
    ST_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
    std::copy_n(reinterpret_cast<const unsigned char*>(prop.uuid.bytes), uuid.size(), uuid.begin());
  }
  int size = 0;
  ST_MPI_CHECK(MPI_Comm_size(world, &size));
  std::vector<std::array<unsigned char, 16>> all(size);
  ST_MPI_CHECK(MPI_Allgather(uuid.data(), 16, MPI_UNSIGNED_CHAR, all.data(), 16, MPI_UNSIGNED_CHAR, world));
  const std::array<unsigned char, 16> none{};
  if (std::find(all.begin(), all.end(), none) != all.end()) return false;
  std::sort(all.begin(), all.end());
  return std::adjacent_find(all.begin(), all.end()) == all.end();
}

}  // namespace shardtune::runtime
