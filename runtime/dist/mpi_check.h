// Every MPI call goes through ST_MPI_CHECK: a failure throws common::Error(kMpi) with the call,
// MPI's own message, host, rank and file:line.
#pragma once

#include <mpi.h>

#include <source_location>

namespace shardtune::dist {

void check_mpi(int rc, const char* expr, const std::source_location& loc);

}  // namespace shardtune::dist

#define ST_MPI_CHECK(expr) ::shardtune::dist::check_mpi((expr), #expr, std::source_location::current())
