// Agreement between ranks: a value or an error, the same on every rank.
#include "runtime/dist/agree.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <vector>

#include "common/error.h"
#include "runtime/dist/busy.h"
#include "runtime/dist/mpi_check.h"
#include "runtime/dist/text_collectives.h"

namespace shardtune::dist {
namespace {

using common::ErrorKind;

// "V<value>" or "E<kind>:<message>".
std::string outcome_of(const std::function<std::string()>& f) {
  try {
    return "V" + f();
  } catch (const common::Error& e) {
    return fmt::format("E{}:{}", static_cast<int>(e.kind()), e.what());
  } catch (const std::exception& e) {
    return fmt::format("E{}:{}", static_cast<int>(ErrorKind::kInternal), e.what());
  }
}

ErrorKind kind_of(const std::string& outcome) { return static_cast<ErrorKind>(std::stoi(outcome.substr(1))); }
std::string message_of(const std::string& outcome) { return outcome.substr(outcome.find(':') + 1); }

std::string value_or_throw(const std::string& outcome) {
  if (!outcome.empty() && outcome[0] == 'V') return outcome.substr(1);
  // The message carries the deciding rank's location already.
  throw common::Error(kind_of(outcome), message_of(outcome));
}

std::string broadcast(std::string text, MPI_Comm comm) {
  int64_t n = static_cast<int64_t>(text.size());
  ST_MPI_CHECK(MPI_Bcast(&n, 1, MPI_INT64_T, 0, comm));
  text.resize(static_cast<size_t>(n));
  if (n > 0) ST_MPI_CHECK(MPI_Bcast(text.data(), static_cast<int>(n), MPI_CHAR, 0, comm));
  return text;
}

}  // namespace

std::string decide_on_root(Communicator& comm, const std::function<std::string()>& decide, const std::string& what) {
  std::string outcome;
  if (comm.rank() == 0) while_busy(what, [&] { outcome = outcome_of(decide); });
  return value_or_throw(broadcast_text(comm, outcome));
}

std::string decide_on_root(MPI_Comm comm, const std::function<std::string()>& decide) {
  int rank = 0;
  ST_MPI_CHECK(MPI_Comm_rank(comm, &rank));
  return value_or_throw(broadcast(rank == 0 ? outcome_of(decide) : std::string(), comm));
}

std::vector<std::string> decide_lines_on_root(Communicator& comm, const std::function<std::vector<std::string>()>& decide,
                                              const std::string& what) {
  const std::string text =
      decide_on_root(comm, [&] { return fmt::format("{}", fmt::join(decide(), "\n")); }, what);
  std::vector<std::string> lines;
  if (text.empty()) return lines;
  for (size_t at = 0;;) {
    const size_t end = text.find('\n', at);
    lines.push_back(text.substr(at, end == std::string::npos ? std::string::npos : end - at));
    if (end == std::string::npos) return lines;
    at = end + 1;
  }
}

void act_on_all(Communicator& comm, const std::string& what, const std::function<void()>& act) {
  const std::string mine = outcome_of([&] {
    act();
    return std::string();
  });
  if (max_over(comm, mine[0] == 'E' ? 1 : 0) == 0) return;
  const std::vector<std::string> all = gather_text(comm, mine);
  decide_on_root(comm, [&]() -> std::string {
    std::vector<std::string> why;
    ErrorKind kind = ErrorKind::kInternal;
    for (size_t r = 0; r < all.size(); ++r) {
      if (all[r][0] != 'E') continue;
      if (why.empty()) kind = kind_of(all[r]);
      why.push_back(fmt::format("rank {}: {}", r, message_of(all[r])));
    }
    throw common::Error(kind, fmt::format("{}: {}", what, fmt::join(why, "; ")));
  });
}

}  // namespace shardtune::dist
