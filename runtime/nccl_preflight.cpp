// NCCL preflight on raw device buffers (works with a CPU-only LibTorch).
#include "runtime/nccl_preflight.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <vector>

#include "common/error.h"
#include "runtime/dist/cuda_check.h"
#include "runtime/dist/mpi_check.h"
#include "runtime/dist/nccl_comm.h"

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

std::string run_nccl_preflight(MPI_Comm world, int device, double timeout_s) {
  int rank = 0, size = 0;
  ST_MPI_CHECK(MPI_Comm_rank(world, &rank));
  ST_MPI_CHECK(MPI_Comm_size(world, &size));
  dist::NcclComm comm = dist::NcclComm::create(world, device, timeout_s);
  constexpr size_t kCount = 1 << 20;
  std::vector<float> host(kCount, static_cast<float>(rank + 1));
  float* buf = nullptr;
  ST_CUDA_CHECK(cudaMalloc(&buf, kCount * sizeof(float)));
  std::string line;
  try {
    cudaStream_t stream = nullptr;
    ST_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    ST_CUDA_CHECK(cudaMemcpyAsync(buf, host.data(), kCount * sizeof(float), cudaMemcpyHostToDevice, stream));
    comm.all_reduce(buf, buf, kCount, dist::DType::kFloat32, dist::ReduceOp::kSum, stream);
    ST_CUDA_CHECK(cudaMemcpyAsync(host.data(), buf, kCount * sizeof(float), cudaMemcpyDeviceToHost, stream));
    comm.synchronize(stream, "NCCL preflight all_reduce");
    ST_CUDA_CHECK(cudaStreamDestroy(stream));
    const float expected = static_cast<float>(size) * static_cast<float>(size + 1) / 2.0f;
    for (size_t i = 0; i < kCount; i += 4099)
      ST_CHECK(host[i] == expected, common::ErrorKind::kNccl, "NCCL preflight: element {} is {}, expected {}", i,
               host[i], expected);
    line = fmt::format("NCCL preflight passed on device {}: all-reduce of {} ranks", device, size);
  } catch (...) {
    cudaFree(buf);
    throw;
  }
  ST_CUDA_CHECK(cudaFree(buf));
  return line;
}

}  // namespace shardtune::runtime
