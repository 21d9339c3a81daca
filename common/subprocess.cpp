// Running a program by argv and collecting its output.
#include "common/subprocess.h"

#include <fcntl.h>
#include <poll.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "common/error.h"
#include "common/shell_words.h"

extern char** environ;

namespace shardtune::common {
namespace {


struct Pipe {
  int read = -1, write = -1;
  Pipe() {
    int fds[2];
    ST_CHECK(::pipe2(fds, O_CLOEXEC) == 0, ErrorKind::kIo, "pipe: {}", std::strerror(errno));
    read = fds[0];
    write = fds[1];
  }
  ~Pipe() {
    if (read >= 0) ::close(read);
    if (write >= 0) ::close(write);
  }
  void close_write() {
    ::close(write);
    write = -1;
  }
};

// Reads both pipes to their end without letting either fill up.
void drain(Pipe& out, Pipe& err, CommandResult& result) {
  pollfd fds[2] = {{out.read, POLLIN, 0}, {err.read, POLLIN, 0}};
  std::string* sinks[2] = {&result.out, &result.err};
  int open = 2;
  char buffer[4096];
  while (open > 0) {
    if (::poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      common::raise(ErrorKind::kIo, fmt::format("poll: {}", std::strerror(errno)));
    }
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || fds[i].revents == 0) continue;
      const ssize_t n = ::read(fds[i].fd, buffer, sizeof buffer);
      if (n > 0) {
        sinks[i]->append(buffer, static_cast<size_t>(n));
      } else if (n == 0 || errno != EINTR) {
        fds[i].fd = -1;
        --open;
      }
    }
  }
}

}  // namespace

std::string sibling_executable(const std::string& name) {
  std::error_code ec;
  const auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  ST_CHECK(!ec, ErrorKind::kIo, "cannot find this program's executable: {}", ec.message());
  const auto path = self.parent_path() / name;
  ST_CHECK(std::filesystem::exists(path), ErrorKind::kIo,
           "{} is missing next to {}: build the whole project (scripts/setup.sh)", path.string(), self.string());
  return path.string();
}

std::string command_line(const std::vector<std::string>& argv) {
  std::string line;
  for (const std::string& a : argv) {
    const bool plain = !a.empty() && a.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                                         "0123456789-_=./:,@%+") == std::string::npos;
    line += (line.empty() ? "" : " ") + (plain ? a : common::shell_quote(a));
  }
  return line;
}

CommandResult run_command(const std::vector<std::string>& argv) {
  ST_CHECK(!argv.empty(), ErrorKind::kInternal, "run_command: empty argv");
  Pipe out, err;
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, out.write, STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&actions, err.write, STDERR_FILENO);
  std::vector<char*> c_argv;
  for (const std::string& a : argv) c_argv.push_back(const_cast<char*>(a.c_str()));
  c_argv.push_back(nullptr);
  pid_t pid = -1;
  const int rc = ::posix_spawnp(&pid, c_argv[0], &actions, nullptr, c_argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  ST_CHECK(rc == 0, ErrorKind::kIo, "cannot run {}: {}", argv[0], std::strerror(rc));
  out.close_write();
  err.close_write();
  CommandResult result;
  drain(out, err, result);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
    ST_CHECK(errno == EINTR, ErrorKind::kIo, "waitpid({}): {}", argv[0], std::strerror(errno));
  }
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return result;
}

}  // namespace shardtune::common
