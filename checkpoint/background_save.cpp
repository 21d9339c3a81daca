// A checkpoint save on a thread of its own.
#include "checkpoint/background_save.h"

#include <ATen/record_function.h>
#include <sys/resource.h>

#include <chrono>

#include <spdlog/spdlog.h>

#include "checkpoint/commit.h"
#include "common/fault_injection.h"
#include "runtime/dist/busy.h"
#include "runtime/dist/cpu_threads.h"
#include "runtime/dist/text_collectives.h"

namespace shardtune::checkpoint {
namespace {

// Wall-clock and CPU seconds of the calling thread.
struct Clocks {
  double wall = 0, cpu = 0;
  static Clocks now() {
    rusage u{};
    getrusage(RUSAGE_THREAD, &u);
    const auto seconds = [](const timeval& t) { return static_cast<double>(t.tv_sec) + 1e-6 * static_cast<double>(t.tv_usec); };
    return {std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(),
            seconds(u.ru_utime) + seconds(u.ru_stime)};
  }
};

}  // namespace

BackgroundSave::BackgroundSave(std::unique_ptr<CheckpointSave> save, std::vector<at::Tensor>& buffers)
    : save_(std::move(save)), buffers_(buffers), thread_([this] { run(); }) {}

BackgroundSave::~BackgroundSave() {
  if (thread_.joinable()) thread_.join();
}

void BackgroundSave::run() {
  dist::use_one_thread_here();  // the training threads keep the cores
  common::save_delay_point("copy");
  auto release = [this] {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      copied_ = true;
    }
    copied_signal_.notify_all();
  };
  const bool copies = save_->copies_to_host();
  if (copies) {  // shards on a GPU: to host memory first, then written from there
    const Clocks start = Clocks::now();
    {
      RECORD_USER_SCOPE("checkpoint.copy");
      save_->copy_to_host(buffers_);
    }
    const Clocks copied = Clocks::now();
    times_.copy = copied.wall - start.wall;
    times_.copy_cpu = copied.cpu - start.cpu;
    release();
  }
  const Clocks before = Clocks::now();
  {
    RECORD_USER_SCOPE("checkpoint.write");
    // Shards in host memory are written in place: the update waits until they are written.
    save_->write(copies ? std::function<void()>() : std::function<void()>(release));
  }
  release();
  common::save_delay_point("write");
  const Clocks written = Clocks::now();
  times_.write = written.wall - before.wall;
  times_.write_cpu = written.cpu - before.cpu;
  std::lock_guard<std::mutex> lock(mutex_);
  done_ = true;
}

void BackgroundSave::wait_for_copy() {
  std::unique_lock<std::mutex> lock(mutex_);
  copied_signal_.wait(lock, [this] { return copied_; });
}

bool BackgroundSave::written(dist::Communicator& world) {
  bool mine = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    mine = done_;
  }
  return dist::min_over(world, mine ? 1 : 0) == 1;
}

std::string BackgroundSave::commit(Pruner& pruner) {
  // The write may still be going (a slow file system): the ranks already in the commit wait for it.
  if (thread_.joinable())
    dist::while_busy(fmt::format("writing its files of checkpoint step {}", save_->step()), [&] { thread_.join(); });
  return save_->commit(&pruner);
}

void Pruner::start(std::string root, int64_t keep_last, std::string keep, int64_t older_than_ns) {
  wait();
  thread_ = std::thread([root = std::move(root), keep_last, keep = std::move(keep), older_than_ns] {
    for (const std::string& w : prune_checkpoints(root, keep_last, keep, older_than_ns))
      spdlog::warn("checkpoint {}/{} is committed, but {}", root, keep, w);
  });
}

void Pruner::wait() {
  if (thread_.joinable()) thread_.join();
}

}  // namespace shardtune::checkpoint
