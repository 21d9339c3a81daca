// Strings over MPI, for agreeing on errors and gathering small records: rank 0's text on every
// rank, and every rank's text on rank 0.
#pragma once

#include <mpi.h>

#include <string>
#include <vector>

namespace shardtune::dist {

std::string broadcast_text(std::string text, MPI_Comm comm);

// On rank 0: each rank's text in rank order; elsewhere: empty.
std::vector<std::string> gather_text(const std::string& mine, MPI_Comm comm);

}  // namespace shardtune::dist
