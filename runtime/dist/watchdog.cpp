// Collective timeouts and the census that names the ranks that never arrived.
#include "runtime/dist/watchdog.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <sched.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstring>
#include <map>
#include <thread>

#include "common/error.h"
#include "runtime/dist/mpi_check.h"

namespace shardtune::dist {
namespace {

using Clock = std::chrono::steady_clock;
constexpr int kCensusTag = 7001;

// What a stuck rank tells its peers: which collective it is waiting in.
struct CensusMessage {
  uint64_t seq;
  std::array<char, 32> op;
};

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Poll quickly at first (small collectives finish in microseconds), then back off so that
// oversubscribed ranks leave the cores to the peers they are waiting for.
void back_off(int& polls) {
  ++polls;
  if (polls < 64) return;
  if (polls < 1024) {
    sched_yield();
    return;
  }
  std::this_thread::sleep_for(std::chrono::microseconds(std::min(1000, (polls - 1024) + 50)));
}

}  // namespace

Watchdog::Watchdog(MPI_Comm comm, std::string group_name, std::vector<int> world_ranks, double timeout_s)
    : group_name_(std::move(group_name)), world_ranks_(std::move(world_ranks)), timeout_s_(timeout_s) {
  ST_MPI_CHECK(MPI_Comm_dup(comm, &census_comm_));
  // A dead peer must not turn the census itself into an abort inside MPI.
  ST_MPI_CHECK(MPI_Comm_set_errhandler(census_comm_, MPI_ERRORS_RETURN));
  ST_MPI_CHECK(MPI_Comm_rank(census_comm_, &rank_));
  ST_MPI_CHECK(MPI_Comm_size(census_comm_, &size_));
}

Watchdog::~Watchdog() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized && census_comm_ != MPI_COMM_NULL) MPI_Comm_free(&census_comm_);
}

void Watchdog::wait(const std::function<bool()>& poll, const CollectiveDesc& desc) {
  const auto start = Clock::now();
  int polls = 0;
  while (!poll()) {
    if (polls % 64 == 0 && seconds_since(start) > timeout_s_) {
      fail(poll, desc);
      return;  // it finished during the census after all
    }
    back_off(polls);
  }
}

void Watchdog::fail(const std::function<bool()>& poll, const CollectiveDesc& desc) {
  // 1. Tell every peer where this rank is stuck.
  CensusMessage mine{desc.seq, {}};
  std::strncpy(mine.op.data(), std::string(desc.op).c_str(), mine.op.size() - 1);
  for (int peer = 0; peer < size_; ++peer) {
    if (peer == rank_) continue;
    MPI_Request req;
    if (MPI_Isend(&mine, sizeof(mine), MPI_BYTE, peer, kCensusTag, census_comm_, &req) == MPI_SUCCESS)
      MPI_Request_free(&req);
  }
  // 2. Listen for a grace period: peers stuck too report within it (they started waiting at about
  //    the same time); those that stay silent never arrived (busy elsewhere, hung or dead).
  const double grace = std::clamp(timeout_s_ * 0.25, 0.5, 5.0);
  std::map<int, CensusMessage> heard;
  const auto start = Clock::now();
  while (seconds_since(start) < grace) {
    if (poll()) {
      spdlog::warn("{} #{} on group '{}' finished after more than {:.1f} s", desc.op, desc.seq, group_name_,
                   timeout_s_);
      return;
    }
    int flag = 0;
    MPI_Status status;
    if (MPI_Iprobe(MPI_ANY_SOURCE, kCensusTag, census_comm_, &flag, &status) == MPI_SUCCESS && flag) {
      CensusMessage msg{};
      MPI_Recv(&msg, sizeof(msg), MPI_BYTE, status.MPI_SOURCE, kCensusTag, census_comm_, MPI_STATUS_IGNORE);
      // Messages from an earlier census (a collective that then finished) are stale.
      if (msg.seq >= desc.seq || std::string_view(msg.op.data()) != desc.op) heard[status.MPI_SOURCE] = msg;
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  }
  // 3. Name the ranks: missing ones, and ones waiting in some other collective.
  std::vector<std::string> missing;
  std::vector<std::string> elsewhere;
  for (int peer = 0; peer < size_; ++peer) {
    if (peer == rank_) continue;
    const int world = world_ranks_.at(peer);
    auto it = heard.find(peer);
    if (it == heard.end()) {
      missing.push_back(fmt::format("{}", world));
    } else if (it->second.seq != desc.seq || std::string_view(it->second.op.data()) != desc.op) {
      elsewhere.push_back(fmt::format("rank {} is waiting in {} #{}", world, it->second.op.data(), it->second.seq));
    }
  }
  std::string msg = fmt::format("{} #{} on group '{}' ({} ranks) did not finish within {:.1f} s", desc.op, desc.seq,
                                group_name_, size_, timeout_s_);
  if (!missing.empty()) msg += fmt::format("; ranks that never arrived: {}", fmt::join(missing, ", "));
  if (!elsewhere.empty()) msg += fmt::format("; mismatched collectives: {}", fmt::join(elsewhere, "; "));
  if (missing.empty() && elsewhere.empty()) msg += "; every rank arrived: the transport itself is stuck";
  msg += ". HINT: the rank logs under <output_dir>/logs say what the missing ranks were doing";
  common::raise(common::ErrorKind::kTimeout, msg);
}

}  // namespace shardtune::dist
