// The start of a rank, before any model exists: its job checked against what MPI and Slurm
// started, its device, and its communicators built and checked (preflight).
#pragma once

#include <ATen/core/TensorBody.h>

#include "common/job/job.h"
#include "runtime/dist/process_groups.h"
#include "runtime/dist/topology.h"
#include "slurm/slurm_env.h"

namespace shardtune::rank_program {

struct RankStart {
  at::Device device;
  dist::ProcessGroups groups;
};

// Collective over MPI_COMM_WORLD. Throws common::Error(kConfig) naming every way the ranks differ
// from the job (and from `env`, Slurm's view of them), and kInternal when the communicators give a
// wrong result.
RankStart start_rank(const job::Job& job, const dist::Topology& topo, const slurm::SlurmEnv& env);

// Every rank handles the stop signal by now: tell the batch script, which holds Slurm's stop
// signal back until then. Collective over `world`.
void announce_stop_handlers(const job::Job& job, const dist::Topology& topo, const slurm::SlurmEnv& env,
                            dist::Communicator& world);

}  // namespace shardtune::rank_program
