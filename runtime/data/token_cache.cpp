// Token files beside the data.
#include "runtime/data/token_cache.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <regex>

#include "common/error.h"

namespace shardtune::data {
namespace {

namespace fs = std::filesystem;
using common::ErrorKind;

bool trusted(const struct stat& st) { return st.st_uid == ::geteuid() && (st.st_mode & (S_IWGRP | S_IWOTH)) == 0; }

std::string regex_escaped(const std::string& s) {
  static const std::regex special(R"([.^$|()\[\]{}*+?\\])");
  return std::regex_replace(s, special, R"(\$&)");
}

// A temporary file of common::write_file_atomically ("<path>.tmp.<pid>.<n>") whose writer is gone.
bool writer_gone(const std::string& name) {
  const size_t tmp = name.rfind(".tmp.");
  if (tmp == std::string::npos) return false;
  const long pid = std::strtol(name.c_str() + tmp + 5, nullptr, 10);
  return pid > 0 && ::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH;
}

}  // namespace

std::string data_file_stamp(const std::string& path) {
  if (path.empty()) return "none";
  struct stat st {};
  std::error_code ec;
  // What every node of a job sees alike: the path as given (made absolute), not the device
  // number (an NFS mount's differs between nodes) nor symlinks resolved (mounts may differ).
  const std::string where = fs::absolute(path, ec).string();
  if (::stat(path.c_str(), &st) != 0) return fmt::format("{} missing", ec ? path : where);
  return fmt::format("{} size={} mtime={}.{:09d} inode={} ctime={}.{:09d}", ec ? path : where, st.st_size,
                     st.st_mtim.tv_sec, st.st_mtim.tv_nsec, st.st_ino, st.st_ctim.tv_sec, st.st_ctim.tv_nsec);
}

TokenCache::TokenCache(const std::string& data_file, const std::string& fallback_dir, std::string key, std::string what)
    : data_name_(fs::path(data_file).filename().string()), what_(std::move(what)), key_(std::move(key)) {
  const std::string name = fmt::format(".{}.{}.{:016x}.tokens", data_name_, what_, fingerprint(key_));
  paths_ = {(fs::path(data_file).parent_path() / name).string(), (fs::path(fallback_dir) / name).string()};
}

std::shared_ptr<const TokenFile> TokenCache::open(int64_t vocab_size) const {
  for (const std::string& p : paths_) {
    struct stat st {};
    if (::stat(p.c_str(), &st) != 0) continue;
    if (!trusted(st)) {
      spdlog::warn("ignoring the token file {}: it belongs to user {} or others may write it, so its tokens cannot "
                   "be trusted",
                   p, st.st_uid);
      continue;
    }
    try {
      if (auto f = TokenFile::open(p, key_, vocab_size)) {
        ::utimensat(AT_FDCWD, p.c_str(), nullptr, 0);  // used now: remove_stale keeps it
        return f;
      }
    } catch (const common::Error& e) {
      spdlog::warn("{}: tokenizing again", e.what());
    }
  }
  return nullptr;
}

void TokenCache::write(const std::vector<Example>& examples, const std::string& notes) const {
  for (const std::string& p : paths_) {
    try {
      fs::create_directories(fs::path(p).parent_path());
      TokenFile::write(p, key_, examples, notes);
      return;
    } catch (const std::exception& e) {
      spdlog::warn("cannot cache the {} tokens at {}: {}", what_, p, e.what());
    }
  }
  common::raise(ErrorKind::kIo,
                fmt::format("cannot write the tokenized {} data anywhere ({} or {})", what_, paths_[0], paths_[1]));
}

std::vector<std::string> TokenCache::remove_stale(int keep, std::chrono::seconds grace) const {
  const std::regex token_file("\\." + regex_escaped(data_name_) + "\\." + what_ + "\\.[0-9a-f]{16}\\.tokens(\\.tmp\\.[0-9]+\\.[0-9]+)?");
  const auto now = std::chrono::system_clock::now();
  std::vector<std::string> removed;
  for (const std::string& current : paths_) {
    struct Candidate {
      std::string path;
      int64_t used;  // modification time, seconds
    };
    std::vector<Candidate> others;
    std::error_code ec;
    for (const fs::directory_entry& e : fs::directory_iterator(fs::path(current).parent_path(), ec)) {
      const std::string name = e.path().filename().string();
      if (e.path().string() == current || !std::regex_match(name, token_file)) continue;
      struct stat st {};
      if (::lstat(e.path().c_str(), &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != ::geteuid()) continue;
      const auto modified = std::chrono::system_clock::time_point(std::chrono::seconds(st.st_mtim.tv_sec));
      if (now - modified < grace) continue;
      const bool temporary = name.find(".tmp.") != std::string::npos;
      if (temporary && !writer_gone(name)) continue;
      if (temporary || is_older_token_file(e.path().string())) {
        if (fs::remove(e.path(), ec)) removed.push_back(e.path().string());
        continue;
      }
      others.push_back({e.path().string(), st.st_mtim.tv_sec});
    }
    std::sort(others.begin(), others.end(), [](const Candidate& a, const Candidate& b) { return a.used > b.used; });
    for (size_t i = static_cast<size_t>(std::max(0, keep - 1)); i < others.size(); ++i)
      if (fs::remove(others[i].path, ec)) removed.push_back(others[i].path);
  }
  return removed;
}

}  // namespace shardtune::data
