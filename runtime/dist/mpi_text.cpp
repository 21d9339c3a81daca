// Strings over MPI.
#include "runtime/dist/mpi_text.h"

#include <utility>

#include "runtime/dist/mpi_check.h"

namespace shardtune::dist {

std::string broadcast_text(std::string text, MPI_Comm comm) {
  int64_t n = static_cast<int64_t>(text.size());
  ST_MPI_CHECK(MPI_Bcast(&n, 1, MPI_INT64_T, 0, comm));
  text.resize(static_cast<size_t>(n));
  if (n > 0) ST_MPI_CHECK(MPI_Bcast(text.data(), static_cast<int>(n), MPI_CHAR, 0, comm));
  return text;
}

std::vector<std::string> gather_text(const std::string& mine, MPI_Comm comm) {
  int rank = 0, size = 0;
  ST_MPI_CHECK(MPI_Comm_rank(comm, &rank));
  ST_MPI_CHECK(MPI_Comm_size(comm, &size));
  const int len = static_cast<int>(mine.size());
  std::vector<int> lens(static_cast<size_t>(size)), offsets(static_cast<size_t>(size));
  ST_MPI_CHECK(MPI_Gather(&len, 1, MPI_INT, lens.data(), 1, MPI_INT, 0, comm));
  std::string all;
  if (rank == 0) {
    int total = 0;
    for (int i = 0; i < size; ++i) offsets[static_cast<size_t>(i)] = std::exchange(total, total + lens[static_cast<size_t>(i)]);
    all.resize(static_cast<size_t>(total));
  }
  ST_MPI_CHECK(MPI_Gatherv(mine.data(), len, MPI_CHAR, all.data(), lens.data(), offsets.data(), MPI_CHAR, 0, comm));
  std::vector<std::string> out;
  if (rank == 0)
    for (int i = 0; i < size; ++i)
      out.push_back(all.substr(static_cast<size_t>(offsets[static_cast<size_t>(i)]),
                               static_cast<size_t>(lens[static_cast<size_t>(i)])));
  return out;
}

}  // namespace shardtune::dist
