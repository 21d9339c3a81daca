// Fault injection for tests of stops and crashes; both variables are unset in real runs.
// - SHARDTUNE_TEST_KILL_AT="<phase>@<step>:<rank>": that rank SIGKILLs itself when a save of that
//   step reaches that phase (started, files-written, manifest-written, renamed, latest-updated);
//   "*" as the step matches a save of any step.
// - SHARDTUNE_TEST_SIGNAL_AT="<step>:<rank>": that rank receives SIGUSR1 (what Slurm sends ahead of
//   a time limit) once optimizer step <step> is taken, so the ranks stop at that step's boundary.
// - SHARDTUNE_TEST_SAVE_DELAY_S="<part>:<seconds>": a checkpoint written in the background waits that
//   long before its part: copy (before it reads the state, which the next optimizer update waits
//   for) or write (before it reports its files written: training goes on with the save in flight).
// - SHARDTUNE_TEST_NONFINITE_AT="<step>:<rank>": that rank's loss of optimizer step <step> is NaN,
//   as a diverging run's is; the step's reduction gives every rank the NaN.
// - SHARDTUNE_TEST_GROUP_FAIL_AT="<step>:<rank>:<group>": that rank marks the group failed during
//   that step, as a communicator with an asynchronous error would be (group_fail_point).
// - SHARDTUNE_TEST_SLOW_IO="<call>:<seconds>:<rank>": on that world rank (OMPI_COMM_WORLD_RANK or
//   PMIX_RANK), each such call takes that much longer, as on a busy parallel file system: fsync
//   (every fsync/fdatasync of a checkpoint file or folder) or unlink (each checkpoint pruned).
#pragma once

#include <cstdint>
#include <string>

namespace shardtune::common {

void kill_point(const char* phase, int64_t step, int rank = 0);
void signal_point(int64_t step, int rank);
void save_delay_point(const char* part);
bool nonfinite_point(int64_t step, int rank);
void slow_io_point(const char* call);
// SHARDTUNE_TEST_GROUP_FAIL_AT="<step>:<rank>:<group>": the group (world, shard, replicate) that
// rank marks failed during optimizer step <step>, once backward's collectives are done; else "".
std::string group_fail_point(int64_t step, int rank);

}  // namespace shardtune::common
