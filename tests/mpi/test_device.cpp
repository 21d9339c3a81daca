// Test device selection and groups.
#include "tests/mpi/test_device.h"

#include <ATen/Context.h>
#include <mpi.h>

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "common/error.h"
#include "runtime/dist/device.h"
#include "runtime/dist/gpu_sharing.h"
#include "runtime/dist/topology.h"

namespace shardtune::testing_support {
namespace {

c10::Device choose() {
  const char* want = std::getenv("ST_TEST_DEVICE");
  if (want == nullptr || std::string(want).empty() || std::string(want) == "cpu") return c10::kCPU;
  ST_CHECK(std::string(want) == "cuda", common::ErrorKind::kConfig, "ST_TEST_DEVICE={}: expected cpu or cuda", want);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm node;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node);
  int local_rank = 0, local_size = 1;
  MPI_Comm_rank(node, &local_rank);
  MPI_Comm_size(node, &local_size);
  MPI_Comm_free(&node);
  // Several ranks on one GPU is what the tests want when there is only one: each uses device 0.
  const dist::DeviceChoice c =
      dist::choose_device(dist::DeviceRequest::kCuda, local_rank, local_size, dist::visible_gpus(), dist::cuda_build());
  dist::bind_device(c.device);
  // Some tests compare two GPU runs bitwise (overlapped against collective by collective, with
  // and without recomputation), which needs deterministic kernels: strict mode makes flash and
  // memory-efficient attention's backward deterministic and keeps cuDNN attention out (it has no
  // deterministic backward); LibTorch before 2.9 also wants cuBLAS's workspace fixed first.
  setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8", /*overwrite=*/0);
  at::globalContext().setDeterministicAlgorithms(true, /*warn_only=*/false);
  return c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(c.device));
}

}  // namespace

const c10::Device& test_device() {
  static const c10::Device device = choose();
  return device;
}

dist::ProcessGroups make_test_groups(int shard_size, double timeout_s) {
  const c10::Device& device = test_device();
  const int index = device.is_cuda() ? device.index() : -1;
  return dist::make_process_groups(MPI_COMM_WORLD, shard_size,
                                   {timeout_s, index, dist::choose_device_collectives(MPI_COMM_WORLD, index)});
}

int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

int world_size() {
  int w = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &w);
  return w;
}

std::string shared_temp_dir(const std::string& name) {
  std::string dir;
  if (world_rank() == 0) {
    dir = (std::filesystem::temp_directory_path() / ("shardtune_" + name + "_" + std::to_string(::getpid()))).string();
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
  }
  int n = static_cast<int>(dir.size());
  MPI_Bcast(&n, 1, MPI_INT, 0, MPI_COMM_WORLD);
  dir.resize(static_cast<size_t>(n));
  MPI_Bcast(dir.data(), n, MPI_CHAR, 0, MPI_COMM_WORLD);
  return dir;
}

}  // namespace shardtune::testing_support
