// The registry of unfinished outputs, and the interrupt handler that removes them.
#include "common/interrupt_cleanup.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <mutex>

namespace shardtune::common {
namespace {

constexpr int kSlots = 16;
constexpr size_t kPathBytes = 4096;
char g_paths[kSlots][kPathBytes];
std::atomic<bool> g_active[kSlots];
std::mutex g_registering;  // registration only; the handler reads the flags

struct LinuxDirent64 {
  uint64_t d_ino;
  int64_t d_off;
  unsigned short d_reclen;
  unsigned char d_type;
  char d_name[1];
};

bool dot_or_dotdot(const char* n) { return n[0] == '.' && (n[1] == '\0' || (n[1] == '.' && n[2] == '\0')); }

void say(const char* a, const char* b) {
  size_t n = 0;
  while (a[n] != '\0') ++n;
  (void)!::write(STDERR_FILENO, a, n);
  n = 0;
  while (b[n] != '\0') ++n;
  (void)!::write(STDERR_FILENO, b, n);
  (void)!::write(STDERR_FILENO, "\n", 1);
}

// Removes `name` under `parent` (a file, or a folder and everything in it), with system calls only.
void remove_tree(int parent, const char* name, int depth) {
  if (::unlinkat(parent, name, 0) == 0 || (errno != EISDIR && errno != EPERM) || depth > 16) return;
  const int fd = ::openat(parent, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return;
  alignas(8) char buf[4096];
  // Entries removed while the folder is read may hide others: read it again until a pass finds none.
  for (int pass = 0; pass < 8; ++pass) {
    bool found = false;
    ::lseek(fd, 0, SEEK_SET);
    for (;;) {
      const long n = ::syscall(SYS_getdents64, fd, buf, sizeof buf);
      if (n <= 0) break;
      for (long at = 0; at < n;) {
        const auto* d = reinterpret_cast<const LinuxDirent64*>(buf + at);
        at += d->d_reclen;
        if (dot_or_dotdot(d->d_name)) continue;
        found = true;
        remove_tree(fd, d->d_name, depth + 1);
      }
    }
    if (!found) break;
  }
  ::close(fd);
  ::unlinkat(parent, name, AT_REMOVEDIR);
}

extern "C" void on_interrupt(int signal) {
  for (int i = 0; i < kSlots; ++i) {
    if (!g_active[i].load() || ::faccessat(AT_FDCWD, g_paths[i], F_OK, AT_SYMLINK_NOFOLLOW) != 0) continue;
    remove_tree(AT_FDCWD, g_paths[i], 0);
    say("interrupted: removed the unfinished output ", g_paths[i]);
  }
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  ::sigaction(signal, &dfl, nullptr);
  ::raise(signal);
}

}  // namespace

void remove_temporaries_on_interrupt() {
  for (int s : {SIGINT, SIGTERM, SIGHUP}) {
    struct sigaction old {};
    if (::sigaction(s, nullptr, &old) != 0 || old.sa_handler != SIG_DFL) continue;
    struct sigaction action {};
    action.sa_handler = on_interrupt;
    sigemptyset(&action.sa_mask);
    ::sigaction(s, &action, nullptr);
  }
}

int register_temporary(const std::string& path) {
  if (path.empty() || path.size() >= kPathBytes) return -1;
  const std::lock_guard<std::mutex> lock(g_registering);
  for (int i = 0; i < kSlots; ++i) {
    if (g_active[i].load()) continue;
    std::memcpy(g_paths[i], path.c_str(), path.size() + 1);
    g_active[i].store(true);
    return i;
  }
  return -1;
}

void forget_temporary(int handle) {
  if (handle >= 0 && handle < kSlots) g_active[handle].store(false);
}

}  // namespace shardtune::common
