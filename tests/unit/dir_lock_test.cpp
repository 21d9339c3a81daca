// The output directory's lock: one holder at a time, the holder named to whoever is refused,
// released when the holder ends, and kept by a program the holder execs into.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <string>

#include "common/dir_lock.h"

namespace shardtune::common {
namespace {

namespace fs = std::filesystem;

class DirLockTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = (fs::temp_directory_path() / ("st-dir-lock-" + std::to_string(::getpid()))).string();
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string dir_;
};

TEST_F(DirLockTest, OneHolderAtATimeAndTheRefusedLearnWho) {
  {
    DirLock first = DirLock::try_acquire(dir_ + "/out", "the first writer");
    ASSERT_EQ(first.outcome(), DirLock::Outcome::kHeld);
    EXPECT_TRUE(fs::exists(dir_lock_path(dir_ + "/out")));
    // flock(2) locks belong to open files: a second opening conflicts, even in this process.
    const DirLock second = DirLock::try_acquire(dir_ + "/out", "the second writer");
    EXPECT_EQ(second.outcome(), DirLock::Outcome::kRefused);
    EXPECT_EQ(second.detail(), "the first writer");
    DirLock moved(std::move(first));
    EXPECT_EQ(DirLock::try_acquire(dir_ + "/out", "a third").outcome(), DirLock::Outcome::kRefused);
  }
  const DirLock after = DirLock::try_acquire(dir_ + "/out", "after the first ended");
  EXPECT_EQ(after.outcome(), DirLock::Outcome::kHeld);
}

// A child takes the lock and execs a shell that reports it started, then sleeps. Returns the
// child's pid once the exec happened.
pid_t lock_then_exec(const std::string& dir, bool keep) {
  int ready[2];
  if (::pipe(ready) != 0) return -1;
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(ready[0]);
    DirLock lock = DirLock::try_acquire(dir, "the exec'd child");
    if (lock.outcome() != DirLock::Outcome::kHeld) ::_exit(3);
    if (keep) lock.keep_across_exec();
    ::dup2(ready[1], STDOUT_FILENO);
    ::execl("/bin/sh", "sh", "-c", "echo started; exec sleep 60", static_cast<char*>(nullptr));
    ::_exit(4);
  }
  ::close(ready[1]);
  char c = 0;
  const bool started = ::read(ready[0], &c, 1) == 1;
  ::close(ready[0]);
  return started ? pid : -1;
}

void end(pid_t pid) {
  ::kill(pid, SIGKILL);
  int status = 0;
  ::waitpid(pid, &status, 0);
}

TEST_F(DirLockTest, AProgramExecdByTheHolderKeepsTheLock) {
  const pid_t keeper = lock_then_exec(dir_, true);
  ASSERT_GT(keeper, 0);
  const DirLock refused = DirLock::try_acquire(dir_, "the parent");
  EXPECT_EQ(refused.outcome(), DirLock::Outcome::kRefused);
  EXPECT_EQ(refused.detail(), "the exec'd child");
  end(keeper);
  EXPECT_EQ(DirLock::try_acquire(dir_, "the parent").outcome(), DirLock::Outcome::kHeld);

  // Without keep_across_exec the descriptor closes on exec, and the lock with it.
  const pid_t dropper = lock_then_exec(dir_, false);
  ASSERT_GT(dropper, 0);
  EXPECT_EQ(DirLock::try_acquire(dir_, "the parent").outcome(), DirLock::Outcome::kHeld);
  end(dropper);
}

}  // namespace
}  // namespace shardtune::common
