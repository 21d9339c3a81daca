// SIGBUS in a mapped file as a named error.
#include "common/mapping_guard.h"

#include <fmt/format.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstring>
#include <mutex>

namespace shardtune::common {
namespace {

constexpr size_t kSlots = 1024;
constexpr size_t kMessage = 512;

struct Slot {
  std::atomic<bool> claimed{false};  // by a registration
  std::atomic<bool> used{false};     // complete: the handler may read it
  std::atomic<uintptr_t> begin{0}, end{0};
  char message[kMessage] = {};
};

std::array<Slot, kSlots>& slots() {
  static std::array<Slot, kSlots> s;
  return s;
}

// Async-signal-safe: reads the slots and writes a prepared message.
void on_sigbus(int sig, siginfo_t* info, void*) {
  const auto at = reinterpret_cast<uintptr_t>(info->si_addr);
  for (Slot& s : slots()) {
    if (!s.used.load() || at < s.begin.load() || at >= s.end.load()) continue;
    const ssize_t written = ::write(STDERR_FILENO, s.message, std::strlen(s.message));
    (void)written;
    ::_exit(1);
  }
  ::signal(sig, SIG_DFL);  // not ours: die as the signal would have made us
  ::raise(sig);
}

void install_once() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction action {};
    action.sa_sigaction = on_sigbus;
    action.sa_flags = SA_SIGINFO;
    sigemptyset(&action.sa_mask);
    ::sigaction(SIGBUS, &action, nullptr);
  });
}

}  // namespace

int guard_mapping(const void* base, size_t size, const std::string& path) {
  install_once();
  for (size_t i = 0; i < kSlots; ++i) {
    Slot& s = slots()[i];
    bool expected = false;
    if (!s.claimed.compare_exchange_strong(expected, true)) continue;
    const std::string text = fmt::format(
        "shardtune: {} shrank while it was being read (another process truncated or rewrote it in place); "
        "nothing read from it after that can be trusted. Stopping. HINT: never modify a model, data or token file "
        "that a job is using; rerun the job\n",
        path);
    const size_t n = std::min(text.size(), kMessage - 1);
    std::memcpy(s.message, text.data(), n);
    s.message[n] = '\0';
    s.begin.store(reinterpret_cast<uintptr_t>(base));
    s.end.store(reinterpret_cast<uintptr_t>(base) + size);
    s.used.store(true);
    return static_cast<int>(i);
  }
  return -1;
}

void release_mapping(int slot) {
  if (slot < 0 || static_cast<size_t>(slot) >= kSlots) return;
  Slot& s = slots()[static_cast<size_t>(slot)];
  s.used.store(false);
  s.claimed.store(false);
}

}  // namespace shardtune::common
