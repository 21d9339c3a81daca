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
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "common/error.h"
#include "runtime/dist/mpi_check.h"

namespace shardtune::dist {

// Which collective a rank is waiting in. A timed-out rank announces it to every peer; a peer that
// is waiting in any collective of the group answers with its own.
struct CensusMessage {
  uint64_t seq;
  std::array<char, 48> op;  // an answer's collective, or what a busy rank is doing
  int32_t is_announcement;  // 1: "I timed out, where are you?"; 0: an answer; 2: "busy with <op>"
};

namespace {

using Clock = std::chrono::steady_clock;
constexpr int kCensusTag = 7001;

constexpr int32_t kAnswer = 0, kAnnouncement = 1, kBusy = 2;

CensusMessage make_message(uint64_t seq, std::string_view op, int32_t kind) {
  CensusMessage m{seq, {}, kind};
  std::strncpy(m.op.data(), std::string(op).c_str(), m.op.size() - 1);
  return m;
}
CensusMessage make_message(const CollectiveDesc& desc, bool announcement) {
  return make_message(desc.seq, desc.op, announcement ? kAnnouncement : kAnswer);
}

// The live watchdogs of this process, which a busy rank answers for.
std::mutex live_mutex;
std::vector<Watchdog*> live;

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

// The first collective failure of this process: the rank is on its way out with it. A collective
// started before it and waited for afterwards (by a destructor while that error unwinds, say) fails
// at once with it, instead of waiting out a timeout of its own: without this, each collective in
// flight when a node was lost added a whole timeout to the time the job took to notice.
struct Failure {
  common::ErrorKind kind;
  std::string message;
};
std::mutex failure_mutex;
std::optional<Failure> first_failure;

std::optional<Failure> earlier_failure() {
  std::lock_guard lock(failure_mutex);
  return first_failure;
}

[[noreturn]] void raise_first(common::ErrorKind kind, const std::string& message) {
  {
    std::lock_guard lock(failure_mutex);
    if (!first_failure) first_failure = Failure{kind, message};
  }
  common::raise(kind, message);
}

}  // namespace

std::string first_collective_failure() {
  const std::optional<Failure> f = earlier_failure();
  return f ? f->message : std::string();
}

struct Watchdog::Outgoing {
  CensusMessage message;
  MPI_Request request = MPI_REQUEST_NULL;
};

Watchdog::Watchdog(MPI_Comm comm, std::string group_name, std::vector<int> world_ranks, double timeout_s)
    : group_name_(std::move(group_name)), world_ranks_(std::move(world_ranks)), timeout_s_(timeout_s) {
  ST_MPI_CHECK(MPI_Comm_dup(comm, &census_comm_));
  // A dead peer must not turn the census itself into an abort inside MPI.
  ST_MPI_CHECK(MPI_Comm_set_errhandler(census_comm_, MPI_ERRORS_RETURN));
  ST_MPI_CHECK(MPI_Comm_rank(census_comm_, &rank_));
  ST_MPI_CHECK(MPI_Comm_size(census_comm_, &size_));
  std::lock_guard lock(live_mutex);
  live.push_back(this);
}

Watchdog::~Watchdog() {
  {
    std::lock_guard lock(live_mutex);
    std::erase(live, this);
  }
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  reap_sent();
  // A send to a dead peer may never complete: MPI keeps the request, and its message is left to
  // it (a few bytes, only after a census) rather than freed under a send that may still read it.
  for (auto& out : outbox_) {
    MPI_Request_free(&out->request);
    (void)out.release();
  }
  if (census_comm_ != MPI_COMM_NULL) MPI_Comm_free(&census_comm_);
}

void Watchdog::send_unwaited(const CensusMessage& m, int peer) {
  auto out = std::make_unique<Outgoing>(Outgoing{m, MPI_REQUEST_NULL});
  if (MPI_Isend(&out->message, sizeof(out->message), MPI_BYTE, peer, kCensusTag, census_comm_, &out->request) ==
      MPI_SUCCESS)
    outbox_.push_back(std::move(out));
}

void Watchdog::reap_sent() {
  std::erase_if(outbox_, [](const std::unique_ptr<Outgoing>& out) {
    int done = 0;
    return MPI_Test(&out->request, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS || done;
  });
}

void Watchdog::wait(const std::function<bool()>& poll, const CollectiveDesc& desc) {
  const std::lock_guard in_use(in_use_);
  auto start = Clock::now();
  int polls = 0;
  while (!poll()) {
    if (polls % 64 == 0) {
      if (auto failed = earlier_failure())
        common::raise(failed->kind, fmt::format("{} #{} on group '{}' given up: an earlier collective failed: {}",
                                                desc.op, desc.seq, group_name_, failed->message));
      if (seconds_since(start) > timeout_s_) {
        if (census(poll, desc)) return;  // it finished during the census after all
        start = Clock::now();            // the ranks away are busy: another timeout
      }
      answer_census(desc);
    }
    back_off(polls);
  }
}

std::optional<std::pair<int, CensusMessage>> Watchdog::receive_census(const CollectiveDesc& desc) {
  int flag = 0;
  MPI_Status status;
  if (MPI_Iprobe(MPI_ANY_SOURCE, kCensusTag, census_comm_, &flag, &status) != MPI_SUCCESS || !flag)
    return std::nullopt;
  CensusMessage msg{};
  MPI_Recv(&msg, sizeof(msg), MPI_BYTE, status.MPI_SOURCE, kCensusTag, census_comm_, MPI_STATUS_IGNORE);
  if (msg.is_announcement == kAnnouncement) send_unwaited(make_message(desc, false), status.MPI_SOURCE);
  return std::make_pair(status.MPI_SOURCE, msg);
}

void Watchdog::answer_census(const CollectiveDesc& desc) {
  while (receive_census(desc)) {
  }
  if (!outbox_.empty()) reap_sent();
}

void Watchdog::answer_busy_here(std::string_view what) {
  const std::unique_lock in_use(in_use_, std::try_to_lock);
  if (!in_use.owns_lock()) return;  // another thread waits with it, answering for itself
  for (;;) {
    int flag = 0;
    MPI_Status status;
    if (MPI_Iprobe(MPI_ANY_SOURCE, kCensusTag, census_comm_, &flag, &status) != MPI_SUCCESS || !flag) break;
    CensusMessage msg{};
    MPI_Recv(&msg, sizeof(msg), MPI_BYTE, status.MPI_SOURCE, kCensusTag, census_comm_, MPI_STATUS_IGNORE);
    if (msg.is_announcement == kAnnouncement) send_unwaited(make_message(msg.seq, what, kBusy), status.MPI_SOURCE);
  }
  if (!outbox_.empty()) reap_sent();
}

void Watchdog::answer_busy(std::string_view what) {
  std::lock_guard lock(live_mutex);
  for (Watchdog* w : live) w->answer_busy_here(what);
}

bool Watchdog::census(const std::function<bool()>& poll, const CollectiveDesc& desc) {
  // 1. Ask every peer where it is. Peers waiting in a collective of this group answer at once;
  //    those that stay silent for the grace period never arrived (busy elsewhere, hung or dead).
  const CensusMessage mine = make_message(desc, true);
  const auto asked = [&](int peer) { return peer != rank_ && (desc.peer < 0 || peer == desc.peer); };
  for (int peer = 0; peer < size_; ++peer)
    if (asked(peer)) send_unwaited(mine, peer);
  // 2. Listen, answering other ranks' announcements as well.
  const double grace = std::clamp(timeout_s_ * 0.25, 0.5, 5.0);
  std::map<int, CensusMessage> heard;
  const auto start = Clock::now();
  while (seconds_since(start) < grace) {
    if (poll()) {
      spdlog::warn("{} #{} on group '{}' finished after more than {:.1f} s", desc.op, desc.seq, group_name_,
                   timeout_s_);
      return true;
    }
    if (auto received = receive_census(desc)) {
      const auto& [source, msg] = *received;
      // An announcement from an earlier census whose collective then finished is stale.
      if (msg.is_announcement != kAnnouncement || msg.seq >= desc.seq) heard[source] = msg;
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  }
  // 3. Name the ranks: missing ones, and ones waiting in some other collective.
  std::vector<std::string> missing;
  std::vector<std::string> elsewhere;
  std::vector<std::string> busy;
  for (int peer = 0; peer < size_; ++peer) {
    if (!asked(peer)) continue;
    const int world = world_ranks_.at(peer);
    auto it = heard.find(peer);
    if (it == heard.end()) {
      missing.push_back(fmt::format("{}", world));
    } else if (it->second.is_announcement == kBusy) {
      busy.push_back(fmt::format("rank {} is busy ({})", world, it->second.op.data()));
    } else if (it->second.seq != desc.seq || std::string_view(it->second.op.data()) != desc.op) {
      elsewhere.push_back(fmt::format("rank {} is waiting in {} #{}", world, it->second.op.data(), it->second.seq));
    }
  }
  // Only busy ranks away: the work they do alone takes what it takes.
  if (missing.empty() && elsewhere.empty() && !busy.empty()) {
    spdlog::warn("{} #{} on group '{}' has waited {:.1f} s: {}; waiting another {:.1f} s", desc.op, desc.seq,
                 group_name_, timeout_s_, fmt::join(busy, ", "), timeout_s_);
    return false;
  }
  std::string msg = fmt::format("{} #{} on group '{}' ({} ranks) did not finish within {:.1f} s", desc.op, desc.seq,
                                group_name_, size_, timeout_s_);
  if (!missing.empty()) msg += fmt::format("; ranks that never arrived: {}", fmt::join(missing, ", "));
  if (!elsewhere.empty()) msg += fmt::format("; mismatched collectives: {}", fmt::join(elsewhere, "; "));
  if (missing.empty() && elsewhere.empty()) msg += "; every rank arrived: the transport itself is stuck";
  msg += ". HINT: the rank logs under <output_dir>/logs say what the missing ranks were doing";
  // Ranks that never answered the census are gone (a lost node, a killed process) or stuck for good:
  // the job can go on from its checkpoint without them. A mismatch is a bug, not a loss.
  raise_first(!missing.empty() && elsewhere.empty() ? common::ErrorKind::kPeerLost : common::ErrorKind::kTimeout, msg);
}

}  // namespace shardtune::dist
