// Folders committed by one rename.
#include "common/pending_folder.h"

#include <fmt/format.h>
#include <signal.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <utility>

#include "common/atomic_file.h"
#include "common/error.h"
#include "common/interrupt_cleanup.h"

namespace shardtune::common {
namespace {

namespace fs = std::filesystem;

// "out/" and "out/." name the same folder as "out".
std::string without_trailing_slash(const std::string& dir) {
  std::string s = fs::path(dir).lexically_normal().string();
  while (s.size() > 1 && s.back() == '/') s.pop_back();
  return s;
}

}  // namespace

std::string unique_suffix() {
  static std::atomic<uint64_t> counter{0};
  std::array<char, 64> host{};
  ::gethostname(host.data(), host.size() - 1);
  return fmt::format("{}-{}-{}", host.data(), ::getpid(), counter++);
}

PendingFolder::PendingFolder(std::string final_path)
    : final_(without_trailing_slash(final_path)), tmp_(fmt::format("{}.tmp-{}", final_, unique_suffix())) {
  std::error_code ec;
  ST_CHECK(!fs::is_symlink(fs::symlink_status(final_, ec)), ErrorKind::kIo,
           "{} is a link (to {}): name the folder itself, or a new path", final_,
           fs::read_symlink(final_, ec).string());
  ST_CHECK(!fs::exists(final_, ec) || (fs::is_directory(final_, ec) && fs::is_empty(final_, ec)), ErrorKind::kIo,
           "{} exists and is not an empty folder: choose a new one", final_);
  remove_stale_siblings();
  fs::create_directories(tmp_, ec);
  ST_CHECK(!ec, ErrorKind::kIo, "cannot create {}: {}", tmp_, ec.message());
  registered_ = register_temporary(tmp_);
}

PendingFolder::~PendingFolder() {
  forget_temporary(registered_);
  if (committed_) return;
  std::error_code ec;
  fs::remove_all(tmp_, ec);
}

// <final>.tmp-<host>-<pid>-<n> of this host whose process is gone: an interrupted or killed run's.
void PendingFolder::remove_stale_siblings() const {
  std::array<char, 64> host{};
  ::gethostname(host.data(), host.size() - 1);
  const std::string prefix = fmt::format("{}.tmp-{}-", fs::path(final_).filename().string(), host.data());
  const fs::path parent = fs::path(final_).parent_path().empty() ? fs::path(".") : fs::path(final_).parent_path();
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(parent, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind(prefix, 0) != 0) continue;
    const std::string rest = name.substr(prefix.size());  // <pid>-<n>
    const size_t dash = rest.find('-');
    if (dash == std::string::npos || dash == 0 || rest.find_first_not_of("0123456789-") != std::string::npos) continue;
    const pid_t pid = static_cast<pid_t>(std::stol(rest.substr(0, dash)));
    if (::kill(pid, 0) == 0 || errno != ESRCH) continue;  // alive, or not ours to judge
    std::error_code rm;
    fs::remove_all(e.path(), rm);
    if (!rm) fmt::print(stderr, "removed {}: the unfinished output of a run that was interrupted\n", e.path().string());
  }
}

void PendingFolder::commit() {
  ST_CHECK(!committed_, ErrorKind::kInternal, "{} committed twice", tmp_);
  // Every file was closed by its writer; their data and names must be durable before the rename.
  for (const auto& e : fs::recursive_directory_iterator(tmp_))
    if (e.is_regular_file()) fsync_path(e.path().string(), false);
  fsync_path(tmp_, true);
  ST_CHECK(::rename(tmp_.c_str(), final_.c_str()) == 0, ErrorKind::kIo, "cannot rename {} to {}: {}", tmp_, final_,
           std::strerror(errno));
  committed_ = true;
  forget_temporary(std::exchange(registered_, -1));
  const std::string parent = fs::path(final_).parent_path().string();
  fsync_path(parent.empty() ? "." : parent, true);
}

}  // namespace shardtune::common
