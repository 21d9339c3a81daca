// Strings between the ranks of a group, through its Communicator (so under the watchdog): agreeing
// on an error or a path, and gathering small records to one rank.
#pragma once

#include <string>
#include <vector>

#include "runtime/dist/communicator.h"

namespace shardtune::dist {

// `root`'s text on every rank.
std::string broadcast_text(Communicator& comm, const std::string& text, int root = 0);

// On `root`: each rank's text in group-rank order; elsewhere: empty.
std::vector<std::string> gather_text(Communicator& comm, const std::string& mine, int root = 0);

// The largest of the ranks' values (a failure flag, a step).
int64_t max_over(Communicator& comm, int64_t value);
int64_t min_over(Communicator& comm, int64_t value);

}  // namespace shardtune::dist
