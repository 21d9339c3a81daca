// Folders committed by one rename.
#include "common/pending_folder.h"

#include <fmt/format.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "common/atomic_file.h"
#include "common/error.h"

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
  ST_CHECK(!fs::exists(final_, ec) || (fs::is_directory(final_, ec) && fs::is_empty(final_, ec)), ErrorKind::kIo,
           "{} exists and is not an empty folder: choose a new one", final_);
  fs::create_directories(tmp_, ec);
  ST_CHECK(!ec, ErrorKind::kIo, "cannot create {}: {}", tmp_, ec.message());
}

PendingFolder::~PendingFolder() {
  if (committed_) return;
  std::error_code ec;
  fs::remove_all(tmp_, ec);
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
  const std::string parent = fs::path(final_).parent_path().string();
  fsync_path(parent.empty() ? "." : parent, true);
}

}  // namespace shardtune::common
