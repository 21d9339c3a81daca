// How many files this process may hold open, and how many one component that reads or writes
// many files (a checkpoint reader, its read-ahead, the writers of a reshard) keeps open at once.
// A 512-rank checkpoint has 512 rank files: a tool that held them all open, a few descriptors
// each, would pass the common limit of 1,024, so such components open files on demand and close
// the least recently used beyond their share.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace shardtune::common {

// Raises the soft limit on open files (RLIMIT_NOFILE) to the hard one; the new soft limit.
int64_t raise_open_file_limit();
int64_t open_file_limit();  // the soft limit now
// Files one component keeps open: an eighth of what the limit leaves after 64 descriptors for
// everything else, at least 4.
size_t open_file_share();
// "cannot open PATH: REASON", and when the reason is the limit, what the limit is and what to do.
std::string open_failure(const std::string& path, int error);

}  // namespace shardtune::common
