// One writer per directory (a job's output directory, and its checkpoint directory wherever that
// lies): an exclusive flock(2) on <dir>/.shardtune.lock, held
// for as long as the job runs. `shardtune run` takes it before it writes anything and keeps it
// across exec into mpirun (the descriptor is inherited, so the lock lives until the last process
// holding it exits); the batch script takes the same lock with flock(1) for each start of a Slurm
// job. The lock file names its holder, so a refused writer can say who is writing. A file system
// without flock support (some Lustre or NFS mounts) leaves the directory unguarded, with a reason.
#pragma once

#include <string>

namespace shardtune::common {

// The lock file of an output directory: <output_dir>/<kDirLockName>.
constexpr const char* kDirLockName = ".shardtune.lock";
std::string dir_lock_path(const std::string& output_dir);

class DirLock {
 public:
  enum class Outcome {
    kHeld,         // this process holds the lock
    kRefused,      // another process holds it; detail() is the holder it recorded
    kUnsupported,  // the file system cannot lock; detail() says why
  };

  // Takes the lock without waiting, creating the directory and the lock file as needed, and
  // records `holder` in the file. Throws Error(kIo) naming the file when it cannot be opened.
  static DirLock try_acquire(const std::string& output_dir, const std::string& holder);

  ~DirLock();
  DirLock(DirLock&& other) noexcept;
  DirLock& operator=(DirLock&&) = delete;
  DirLock(const DirLock&) = delete;
  DirLock& operator=(const DirLock&) = delete;

  Outcome outcome() const { return outcome_; }
  const std::string& detail() const { return detail_; }

  // Keeps the lock held by the program this process execs next (clears close-on-exec).
  void keep_across_exec();

 private:
  DirLock(int fd, Outcome outcome, std::string detail) : fd_(fd), outcome_(outcome), detail_(std::move(detail)) {}
  int fd_ = -1;
  Outcome outcome_;
  std::string detail_;
};

// Whether two paths name one existing directory, however they are spelled (".", "..", links, a
// trailing "/"): the same device and inode.
bool same_directory(const std::string& a, const std::string& b);

// "host pid N" of this process, for holder notes.
std::string this_process();

}  // namespace shardtune::common
