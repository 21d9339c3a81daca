// How ranks agree, each way written once.
// - decide_on_root: rank 0 decides (reads a file, chooses a checkpoint); every rank gets its value,
//   or every rank throws the same error.
// - act_on_all: every rank acts (loads its part, writes its file); if any failed, every rank throws
//   one error naming each failed rank and why, so none is left waiting in a later collective.
// Errors keep their common::ErrorKind (other exceptions count as kInternal). The MPI_Comm forms are
// for the start of a rank, before its communicators exist; the others run through a Communicator
// and so under its watchdog.
#pragma once

#include <mpi.h>

#include <functional>
#include <string>
#include <vector>

#include "runtime/dist/communicator.h"

namespace shardtune::dist {

// Rank 0's `decide` runs as work of its own (busy.h: it must not call MPI), said as `what` to the
// ranks waiting for it.
std::string decide_on_root(Communicator& comm, const std::function<std::string()>& decide,
                           const std::string& what = "deciding for the group");
std::string decide_on_root(MPI_Comm comm, const std::function<std::string()>& decide);

// decide_on_root for a list of lines (none may hold a newline; a list of one empty line comes
// back empty): rank 0's on every rank.
std::vector<std::string> decide_lines_on_root(Communicator& comm, const std::function<std::vector<std::string>()>& decide,
                                              const std::string& what = "deciding for the group");

// `what` opens the error: "<what>: rank 1: ...; rank 3: ...".
void act_on_all(Communicator& comm, const std::string& what, const std::function<void()>& act);

}  // namespace shardtune::dist
