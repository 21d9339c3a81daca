// The device the multi-rank tests run on: the CPU, or with ST_TEST_DEVICE=cuda (set by
// scripts/gpu-check.sh) the GPU of the local rank, exactly as a rank of a job would choose it:
// NCCL between ranks that each have a GPU, host-staged MPI between ranks that share one. So the
// same tests check the CPU path in CI and the device path on a GPU machine.
#pragma once

#include <c10/core/Device.h>

#include <string>

#include "runtime/dist/process_groups.h"

namespace shardtune::testing_support {

// Throws when ST_TEST_DEVICE asks for a device this build or machine does not have.
const c10::Device& test_device();

// Collective over MPI_COMM_WORLD: groups carrying test_device()'s tensors.
dist::ProcessGroups make_test_groups(int shard_size, double timeout_s = 60.0);

int world_rank();
int world_size();

// Collective over MPI_COMM_WORLD: an empty folder under the temporary directory, named after
// `name` and the process of world rank 0, which makes it; its path on every rank.
std::string shared_temp_dir(const std::string& name);

}  // namespace shardtune::testing_support
