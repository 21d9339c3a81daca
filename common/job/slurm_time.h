// Slurm's time-limit syntax ("30", "04:00:00", "2-12", "1-00:30:00") to seconds.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace shardtune::job {

// Seconds of a Slurm --time value, or nullopt when it is not one of Slurm's formats:
// M, M:S, H:M:S, D-H, D-H:M, D-H:M:S. "UNLIMITED"/"INFINITE" are not accepted for jobs.
std::optional<int64_t> parse_slurm_time(std::string_view text);

}  // namespace shardtune::job
