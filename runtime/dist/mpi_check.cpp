// MPI error reporting.
#include "runtime/dist/mpi_check.h"

#include <fmt/format.h>

#include "common/error.h"

namespace shardtune::dist {

void check_mpi(int rc, const char* expr, const std::source_location& loc) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING] = {};
  int len = 0;
  if (MPI_Error_string(rc, text, &len) != MPI_SUCCESS) fmt::format_to_n(text, sizeof(text) - 1, "error code {}", rc);
  common::raise(common::ErrorKind::kMpi, fmt::format("{} failed: {}", expr, text), loc);
}

}  // namespace shardtune::dist
