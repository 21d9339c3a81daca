// Never block blindly on a collective: wait for it with a timeout, and when it expires find out
// which ranks never arrived (a census: every rank that is waiting in a collective of the group
// answers), so every waiting rank fails with an error naming them instead of hanging.
//
// A rank may be away on purpose: committing a checkpoint, writing its files, hashing a base model
// while the others wait for it. It says so (dist/busy.h): its main thread answers every census
// "busy with <what>", and a peer that hears only waiting and busy ranks waits another timeout
// instead of failing. A rank that answers nothing (dead, hung in the kernel) is still named lost.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace shardtune::dist {

struct CensusMessage;  // watchdog.cpp

struct CollectiveDesc {
  std::string_view op;  // "all_reduce"
  uint64_t seq = 0;     // the how-many-th collective (or, for a message, message) on this group, from 1
  int peer = -1;        // a message: the group rank at its other end, the only one the census asks
};

// The first collective failure of this process (a timeout, a lost peer), "" while none.
std::string first_collective_failure();

class Watchdog {
 public:
  // `comm` spans the watched group; the watchdog keeps its own duplicate for the census, so
  // census messages never mix with collective traffic. `world_ranks` maps group to world ranks.
  Watchdog(MPI_Comm comm, std::string group_name, std::vector<int> world_ranks, double timeout_s);
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  double timeout_s() const { return timeout_s_; }

  // Calls `poll` until it returns true. After timeout_s, runs the census and throws
  // common::Error(kTimeout) naming the collective and the ranks that had not arrived (waits on
  // while the only ranks away say they are busy).
  void wait(const std::function<bool()>& poll, const CollectiveDesc& desc);

  // Answers every census pending on any live watchdog of this process with "busy with `what`".
  // The thread that calls MPI only.
  static void answer_busy(std::string_view what);

 private:
  // Receives one pending census message, if any, answering it when it is an announcement.
  std::optional<std::pair<int, CensusMessage>> receive_census(const CollectiveDesc& desc);
  // Answers census announcements from peers that timed out: "I am waiting in `desc`".
  void answer_census(const CollectiveDesc& desc);
  // Runs the census: returns true if the collective finished meanwhile, false if the ranks away
  // are busy (wait another timeout), else throws.
  bool census(const std::function<bool()>& poll, const CollectiveDesc& desc);
  void answer_busy_here(std::string_view what);
  // Sends without waiting for delivery (the peer may be dead). MPI may read the message until
  // the send completes, so it stays in the outbox until then.
  void send_unwaited(const CensusMessage& m, int peer);
  // Drops the outbox's messages whose sends have completed.
  void reap_sent();

  struct Outgoing;  // a message and the request sending it

  MPI_Comm census_comm_ = MPI_COMM_NULL;
  std::string group_name_;
  std::vector<int> world_ranks_;
  double timeout_s_;
  int rank_ = 0;
  int size_ = 0;
  std::vector<std::unique_ptr<Outgoing>> outbox_;
  // Held by wait() throughout: a busy rank's main thread answers for a watchdog that another
  // thread (an NCCL group's monitor) is waiting with only when it is free; while it waits, that
  // thread answers the census itself.
  std::mutex in_use_;
};

}  // namespace shardtune::dist
