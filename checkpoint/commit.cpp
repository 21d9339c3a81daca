// The checkpoint commit protocol.
#include "checkpoint/commit.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <stdio.h>  // renameat2
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <map>
#include <optional>
#include <set>

#include "common/fault_injection.h"
#include "common/atomic_file.h"
#include "common/error.h"

namespace shardtune::checkpoint {
namespace {

namespace fs = std::filesystem;
using common::ErrorKind;

constexpr const char* kTmpPrefix = ".tmp-";

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(fs::file_time_type::clock::now().time_since_epoch())
      .count();
}

int64_t mtime_ns(const fs::path& p) {
  std::error_code ec;
  const auto t = fs::last_write_time(p, ec);
  return ec ? 0 : std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}

// Puts `from` in place of `to`. An existing `to` (the same step saved again: after a rollback, a
// fresh start over the same folder, or a step folder without its manifest) is swapped out
// atomically (both names exist throughout) and then set aside as `to`.abandoned-<suffix>, never
// deleted: it may be the only copy of that history. Returns where it went ("" when there was none).
std::string rename_into_place(const std::string& from, const std::string& to, std::vector<std::string>& warnings) {
  if (::rename(from.c_str(), to.c_str()) == 0) return "";
  const int err = errno;
  ST_CHECK(err == EEXIST || err == ENOTEMPTY, ErrorKind::kIo, "cannot rename {} to {}: {}", from, to, std::strerror(err));
  const std::string aside = fmt::format("{}.abandoned-{}", to, common::unique_suffix());
  if (::renameat2(AT_FDCWD, from.c_str(), AT_FDCWD, to.c_str(), RENAME_EXCHANGE) != 0) {
    // A filesystem without RENAME_EXCHANGE: move the old one aside first.
    ST_CHECK(::rename(to.c_str(), aside.c_str()) == 0, ErrorKind::kIo, "cannot move {} aside: {}", to,
             std::strerror(errno));
    ST_CHECK(::rename(from.c_str(), to.c_str()) == 0, ErrorKind::kIo, "cannot rename {} to {}: {}", from, to,
             std::strerror(errno));
    return aside;
  }
  if (::rename(from.c_str(), aside.c_str()) != 0) {  // `from` now holds the replaced checkpoint
    warnings.push_back(fmt::format("could not set aside the replaced {} (now {}): {}", to, from, std::strerror(errno)));
    return from;
  }
  return aside;
}

struct CommittedDir {
  std::string name;
  int64_t step;
  int64_t commit;  // the manifest's commit number, or the step (older checkpoints, damaged manifests)
};

// A checkpoint directory's commit number: its manifest's, or its step (checkpoints from before
// commit numbers; a damaged manifest, which resuming it reports). Read from the head of the
// manifest, not parsed whole: a commit looks at every checkpoint of the folder.
int64_t commit_of(const fs::path& dir, int64_t step) {
  const std::optional<int64_t> commit = read_manifest_commit(dir.string());
  return commit && *commit > 0 ? *commit : step;
}

// Directories named step-N with a manifest file, newest first: by commit number, then by step.
std::vector<CommittedDir> committed_dirs(const std::string& root) {
  std::vector<CommittedDir> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(root, ec)) {
    const std::string name = e.path().filename().string();
    const auto step = step_of_dir_name(name);
    if (!step || !fs::exists(e.path() / kManifestFile)) continue;
    out.push_back({name, *step, commit_of(e.path(), *step)});
  }
  std::sort(out.begin(), out.end(), [](const CommittedDir& a, const CommittedDir& b) {
    return a.commit != b.commit ? a.commit > b.commit : a.step > b.step;
  });
  return out;
}

// The highest commit number in the directory, counting checkpoints set aside (damaged or
// abandoned, step-N.*) too: numbers only grow, so a start that set the newest aside and then
// committed is seen to have made progress.
int64_t highest_commit(const std::string& root) {
  int64_t highest = 0;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(root, ec)) {
    const std::string name = e.path().filename().string();
    const auto step = step_of_dir_name(name.substr(0, name.find('.')));
    if (step && fs::exists(e.path() / kManifestFile)) highest = std::max(highest, commit_of(e.path(), *step));
  }
  return highest;
}

// Committed checkpoints of steps above `step` belong to a history a rollback left (a run resumed
// from an older checkpoint and saved again): they are set aside, never deleted, so that no later
// start resumes them. Returns where each went.
std::vector<std::string> set_aside_later_steps(const std::string& root, int64_t step, std::vector<std::string>& warnings) {
  std::vector<std::string> moved;
  for (const CommittedDir& c : committed_dirs(root)) {
    if (c.step <= step) continue;
    const std::string from = root + "/" + c.name;
    const std::string to = fmt::format("{}.abandoned-{}", from, common::unique_suffix());
    std::error_code ec;
    fs::rename(from, to, ec);
    if (ec) warnings.push_back(fmt::format("could not set aside {}, of a step past the new one: {}", from, ec.message()));
    else moved.push_back(fmt::format("{} (now {}): a later step of the history this run rolled back from (it "
                                     "resumed an older checkpoint, or none)", from, to));
  }
  return moved;
}

// Validates the manifest by reading it back as text, then writes it last and durably.
// The files are checked against one listing of the folder, not a stat per slice (a 70B checkpoint
// of 512 ranks has 128,000 slices).
void write_manifest(const std::string& dir, const Manifest& manifest) {
  std::set<std::string> present;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) present.insert(e.path().filename().string());
  ST_CHECK(!ec, ErrorKind::kIo, "cannot list {}: {}", dir, ec.message());
  for (const ManifestSlice& s : manifest.slices)
    ST_CHECK(is_plain_file_name(s.file) && present.count(s.file) > 0, ErrorKind::kInternal,
             "the manifest lists {}, which is not in {}", s.file, dir);
  const std::string text = manifest_text(manifest);
  parse_manifest(text, dir + "/" + kManifestFile);  // what is committed reads back, or nothing is
  common::AtomicFile file(dir + "/" + kManifestFile);
  file.write(text);
  file.commit();  // fsyncs the file and the directory
}

}  // namespace

std::string step_dir_name(int64_t step) { return fmt::format("step-{:07d}", step); }

std::optional<int64_t> step_of_dir_name(const std::string& name) {
  constexpr std::string_view kPrefix = "step-";
  if (name.size() <= kPrefix.size() || name.size() > kPrefix.size() + 18 || name.compare(0, kPrefix.size(), kPrefix) != 0)
    return std::nullopt;
  int64_t step = 0;
  for (size_t i = kPrefix.size(); i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9') return std::nullopt;
    step = step * 10 + (name[i] - '0');
  }
  return step;
}

PendingCheckpoint::PendingCheckpoint(std::string root, int64_t step)
    : root_(std::move(root)),
      step_(step),
      dir_(fmt::format("{}/{}{}-{}", root_, kTmpPrefix, step_dir_name(step), common::unique_suffix())),
      started_ns_(now_ns()) {
  std::error_code ec;
  fs::create_directories(dir_, ec);
  ST_CHECK(!ec, ErrorKind::kIo, "cannot create {}: {}", dir_, ec.message());
}

PendingCheckpoint::~PendingCheckpoint() {
  if (committed_) return;
  std::error_code ec;
  fs::remove_all(dir_, ec);
}

PendingCheckpoint::Committed PendingCheckpoint::commit(const Manifest& manifest, int64_t keep_last) {
  ST_CHECK(!committed_, ErrorKind::kInternal, "{} committed twice", dir_);
  Manifest numbered = manifest;
  numbered.commit = highest_commit(root_) + 1;
  write_manifest(dir_, numbered);
  common::kill_point("manifest-written", manifest.step);
  const std::string final_dir = root_ + "/" + step_dir_name(step_);
  Committed out{final_dir, {}};
  const std::string replaced = rename_into_place(dir_, final_dir, out.warnings);
  if (!replaced.empty())
    out.set_aside.push_back(fmt::format("{} (now {}): a folder of the same step from an earlier run of this "
                                        "directory (a rolled-back or fresh start, or a save that lost its manifest)",
                                        final_dir, replaced));
  committed_ = true;
  common::fsync_path(root_, true);
  common::kill_point("renamed", manifest.step);
  if (std::optional<std::string> problem = point_latest_at(root_, step_dir_name(step_))) out.warnings.push_back(*problem);
  common::kill_point("latest-updated", manifest.step);
  for (std::string& later : set_aside_later_steps(root_, step_, out.warnings)) out.set_aside.push_back(std::move(later));
  if (keep_last > 0) {
    std::vector<std::string> pruned = prune_checkpoints(root_, keep_last, step_dir_name(step_), started_ns_);
    out.warnings.insert(out.warnings.end(), pruned.begin(), pruned.end());
  }
  return out;
}

PendingDirectory::PendingDirectory(std::string final_dir) : folder_(std::move(final_dir)) {}

void PendingDirectory::commit(const Manifest& manifest) {
  write_manifest(folder_.path(), manifest);
  folder_.commit();
}

std::vector<std::string> prune_checkpoints(const std::string& root, int64_t keep_last, const std::string& keep,
                                           int64_t older_than_ns) {
  std::vector<std::string> problems;
  std::vector<CommittedDir> all = committed_dirs(root);
  std::sort(all.begin(), all.end(), [](const CommittedDir& a, const CommittedDir& b) { return a.step < b.step; });
  const std::optional<int64_t> kept_step = step_of_dir_name(keep);
  // Only checkpoints of a lower step than the one just committed may go, lowest first, while more
  // than keep_last remain. A higher step belongs to another run of this directory: never touched.
  size_t remaining = all.size();
  for (const CommittedDir& c : all) {
    if (remaining <= static_cast<size_t>(keep_last) || !kept_step || c.step >= *kept_step) break;
    common::slow_io_point("unlink");
    std::error_code ec;
    fs::remove_all(fs::path(root) / c.name, ec);
    if (ec) {
      problems.push_back(fmt::format("could not prune checkpoint {}/{}: {}", root, c.name, ec.message()));
      continue;
    }
    --remaining;
  }
  // Leftovers of saves that died: temporary directories untouched since before this save began.
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(root, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind(kTmpPrefix, 0) != 0 || mtime_ns(e.path()) >= older_than_ns) continue;
    std::error_code rm;
    fs::remove_all(e.path(), rm);
    if (rm) problems.push_back(fmt::format("could not remove the leftover {}: {}", e.path().string(), rm.message()));
  }
  return problems;
}

std::vector<std::string> committed_checkpoints(const std::string& root) {
  std::error_code ec;
  if (!fs::is_directory(root, ec)) return {};
  std::vector<std::string> out;
  for (const CommittedDir& c : committed_dirs(root)) out.push_back(root + "/" + c.name);
  return out;
}

std::string pinned_dir(const std::string& path) {
  std::error_code ec;
  const fs::path resolved = fs::canonical(path, ec);
  return ec ? path : resolved.string();
}

std::vector<std::string> uncommitted_step_dirs(const std::string& root) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(root, ec)) {
    if (step_of_dir_name(e.path().filename().string()) && fs::is_directory(e.path()) &&
        !fs::exists(e.path() / kManifestFile))
      out.push_back(e.path().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::optional<std::string> point_latest_at(const std::string& root, const std::string& name) {
  // `latest` moves atomically: a new link under a name of its own, renamed over the old one.
  try {
    const std::string link_tmp = fmt::format("{}/{}latest-{}", root, kTmpPrefix, common::unique_suffix());
    fs::create_directory_symlink(name, link_tmp);
    fs::rename(link_tmp, root + "/latest");
    common::fsync_path(root, true);
  } catch (const std::exception& e) {
    return fmt::format("could not point {}/latest at {}: {}", root, name, e.what());
  }
  return std::nullopt;
}

std::optional<std::string> find_latest_checkpoint(const std::string& root) {
  for (const std::string& dir : committed_checkpoints(root)) {
    try {
      read_manifest(dir);
      return dir;
    } catch (const common::Error& e) {
      spdlog::warn("skipping {}: {}", dir, e.what());
    }
  }
  return std::nullopt;
}

CheckpointPosition newest_position(const std::string& root) {
  for (const std::string& dir : committed_checkpoints(root)) {
    try {
      const Manifest m = read_manifest(dir);
      return {dir, m.step, m.commit > 0 ? m.commit : m.step};
    } catch (const common::Error&) {
    }
  }
  return {};
}

}  // namespace shardtune::checkpoint
