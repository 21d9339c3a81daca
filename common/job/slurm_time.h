// Slurm's time-limit syntax ("30", "04:00:00", "2-12", "1-00:30:00", "UNLIMITED") as Slurm reads it.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace shardtune::job {

// A job's time limit as Slurm applies it.
struct SlurmTimeLimit {
  bool unlimited = false;  // "UNLIMITED", "INFINITE", "-1", or any spelling of zero
  int64_t seconds = 0;     // when limited: whole minutes, rounded up as Slurm rounds them
};

// The limit of a Slurm --time value, or nullopt when it is not one of Slurm's formats: M, M:S,
// H:M:S, D-H, D-H:M, D-H:M:S, or UNLIMITED / INFINITE / -1 (any case). sbatch reads a limit of zero
// ("0", "00:00:00", "0-0") as no limit, and seconds as whole minutes rounded up ("30:15" is 31
// minutes); so does this.
std::optional<SlurmTimeLimit> parse_slurm_time(std::string_view text);

}  // namespace shardtune::job
