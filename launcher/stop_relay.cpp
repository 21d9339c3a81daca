// Stop signals of `shardtune run`, relayed to the ranks (see stop_relay.h).
#include "launcher/stop_relay.h"

#include <dirent.h>
#include <fmt/format.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "common/error.h"

namespace shardtune::launcher {
namespace {

// Parent of each live process, and its name (/proc/PID/stat: "pid (comm) state ppid ...").
struct Proc {
  pid_t parent = 0;
  std::string name;
};

std::map<pid_t, Proc> processes() {
  std::map<pid_t, Proc> out;
  DIR* proc = ::opendir("/proc");
  if (proc == nullptr) return out;
  while (const dirent* e = ::readdir(proc)) {
    char* end = nullptr;
    const long pid = std::strtol(e->d_name, &end, 10);
    if (pid <= 0 || *end != '\0') continue;
    std::ifstream in(fmt::format("/proc/{}/stat", pid));
    std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const size_t open = stat.find('('), close = stat.rfind(')');
    if (open == std::string::npos || close == std::string::npos || close < open) continue;
    std::istringstream rest(stat.substr(close + 1));
    char state = 0;
    long parent = 0;
    rest >> state >> parent;
    if (state == 'Z') continue;
    out[static_cast<pid_t>(pid)] = {static_cast<pid_t>(parent), stat.substr(open + 1, close - open - 1)};
  }
  ::closedir(proc);
  return out;
}

// The processes under `root` named `name`.
std::vector<pid_t> descendants_named(pid_t root, const std::string& name) {
  const std::map<pid_t, Proc> all = processes();
  std::multimap<pid_t, pid_t> children;
  for (const auto& [pid, p] : all) children.emplace(p.parent, pid);
  std::vector<pid_t> found, queue{root};
  std::set<pid_t> seen{root};
  while (!queue.empty()) {
    const pid_t at = queue.back();
    queue.pop_back();
    const auto [first, last] = children.equal_range(at);
    for (auto it = first; it != last; ++it) {
      if (!seen.insert(it->second).second) continue;
      queue.push_back(it->second);
      if (all.at(it->second).name == name) found.push_back(it->second);
    }
  }
  return found;
}

// Whether `pid` has a handler for `signal` (/proc/PID/status, SigCgt: a hex mask, bit signal - 1).
bool catches(pid_t pid, int signal) {
  std::ifstream in(fmt::format("/proc/{}/status", pid));
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("SigCgt:", 0) != 0) continue;
    const unsigned long long mask = std::strtoull(line.c_str() + 7, nullptr, 16);
    return (mask >> (signal - 1)) & 1ULL;
  }
  return false;
}

const int kStopSignals[] = {SIGINT, SIGTERM, SIGHUP, SIGUSR1};

pid_t start_child(const std::vector<std::string>& argv, const sigset_t& original_mask) {
  std::vector<char*> c_argv;
  for (const std::string& a : argv) c_argv.push_back(const_cast<char*>(a.c_str()));
  c_argv.push_back(nullptr);
  std::fflush(nullptr);
  const pid_t child = ::fork();
  if (child < 0) common::raise(common::ErrorKind::kIo, fmt::format("cannot start {}: {}", argv[0], std::strerror(errno)));
  if (child == 0) {
    // A group of its own: a terminal's Ctrl-C reaches `shardtune run` alone, which relays it.
    ::setpgid(0, 0);
    ::sigprocmask(SIG_SETMASK, &original_mask, nullptr);
    ::execvp(c_argv[0], c_argv.data());
    std::fprintf(stderr, "shardtune run: cannot start %s: %s\n", c_argv[0], std::strerror(errno));
    ::_exit(127);
  }
  return child;
}

}  // namespace

int run_relaying_stops(const std::vector<std::string>& argv, const std::string& rank_name) {
  sigset_t stops, original;
  sigemptyset(&stops);
  for (int s : kStopSignals) sigaddset(&stops, s);
  // Blocked from before the child exists, so that no stop is lost; taken below with sigtimedwait.
  ::sigprocmask(SIG_BLOCK, &stops, &original);
  const pid_t child = start_child(argv, original);
  int stops_seen = 0;
  std::set<pid_t> told;  // ranks already sent their SIGUSR1
  const timespec poll{0, 100'000'000};
  for (;;) {
    siginfo_t info{};
    const int s = ::sigtimedwait(&stops, &info, &poll);
    if (s > 0) {
      ++stops_seen;
      if (stops_seen == 1) {
        std::fprintf(stderr,
                     "shardtune run: %s: each rank writes a checkpoint at its next step boundary and stops (send "
                     "it again to stop at once, losing the steps since the last checkpoint)\n",
                     strsignal(s));
      } else if (stops_seen == 2) {
        std::fprintf(stderr, "shardtune run: %s again: stopping the ranks now\n", strsignal(s));
        ::kill(child, SIGTERM);
      }
    }
    int status = 0;
    const pid_t done = ::waitpid(child, &status, WNOHANG);
    if (done == child) {
      ::sigprocmask(SIG_SETMASK, &original, nullptr);
      return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    }
    // Each rank gets its stop once it can take it: a rank still starting (before its handler is
    // installed) would be killed by the signal, so it is told on a later round.
    if (stops_seen == 1) {
      for (pid_t rank : descendants_named(child, rank_name)) {
        if (told.count(rank) == 0 && catches(rank, SIGUSR1) && ::kill(rank, SIGUSR1) == 0) told.insert(rank);
      }
    }
  }
}

}  // namespace shardtune::launcher
