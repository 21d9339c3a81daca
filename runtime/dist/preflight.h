// Preflight on a new allocation: every communicator the job will train with is exercised, with
// tensors on the device the job trains on (so NCCL too), against answers each rank can compute by
// itself, and the world all-reduce bandwidth is measured.
#pragma once

#include <string>

#include <c10/core/Device.h>

#include "runtime/dist/process_groups.h"

namespace shardtune::dist {

struct PreflightReport {
  int failures = 0;           // summed over all ranks: every rank sees the same number
  double allreduce_gbps = 0;  // algorithm bandwidth of an fp32 all-reduce on the world group
  int64_t allreduce_bytes = 0;
  std::string summary;        // what failed, on this rank
};

PreflightReport run_preflight(ProcessGroups& groups, const at::Device& device = at::kCPU);

}  // namespace shardtune::dist
