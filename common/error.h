// Typed errors for every component, and the process identity (host, rank) that error messages carry.
#pragma once

#include <fmt/format.h>

#include <source_location>
#include <stdexcept>
#include <string>
#include <string_view>

namespace shardtune::common {

enum class ErrorKind {
  kUsage,     // bad command line
  kConfig,    // bad input the user can fix: job file, --set override, model or tokenizer files, placement
  kIo,        // file system
  kMpi,       // an MPI call failed
  kNccl,      // an NCCL call failed
  kCuda,      // a CUDA runtime call failed
  kHdf5,      // an HDF5 call failed
  kTimeout,   // a collective did not finish in time (watchdog)
  kPeerLost,  // a collective timed out because ranks never arrived: a lost node or process
  kDiverged,  // training produced a non-finite loss, gradient or weight: the run stops without saving it
  kInternal,  // a broken invariant: a bug in shardtune
};

std::string_view to_string(ErrorKind kind);

class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, const std::string& message) : std::runtime_error(message), kind_(kind) {}
  ErrorKind kind() const noexcept { return kind_; }

 private:
  ErrorKind kind_;
};

// Who this process is, for error messages and log lines. Set once after MPI starts; before that
// rank is -1 and host is the local hostname.
struct ProcessIdentity {
  std::string host;
  int rank = -1;
  int world_size = 0;
  int node = -1;
  int local_rank = -1;
};

const ProcessIdentity& process_identity();
void set_process_identity(ProcessIdentity identity);

// "host n1 rank 3 (runtime/dist/mpi_communicator.cpp:42)": where an error happened.
std::string error_location(const std::source_location& loc);

// Throws Error(kind) with the location appended.
[[noreturn]] void raise(ErrorKind kind, const std::string& message,
                        const std::source_location& loc = std::source_location::current());

}  // namespace shardtune::common

// Checks an invariant or a user-facing condition; the message is a fmt format string.
#define ST_CHECK(cond, kind, ...)                                              \
  do {                                                                         \
    if (!(cond)) ::shardtune::common::raise((kind), ::fmt::format(__VA_ARGS__)); \
  } while (0)
