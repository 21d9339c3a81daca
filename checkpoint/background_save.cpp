// A checkpoint save on a thread of its own.
#include "checkpoint/background_save.h"

#include <ATen/record_function.h>

#include "common/fault_injection.h"
#include "runtime/dist/cpu_threads.h"
#include "runtime/dist/text_collectives.h"

namespace shardtune::checkpoint {

BackgroundSave::BackgroundSave(std::unique_ptr<CheckpointSave> save, std::vector<at::Tensor>& buffers)
    : save_(std::move(save)), buffers_(buffers), thread_([this] { run(); }) {}

BackgroundSave::~BackgroundSave() {
  if (thread_.joinable()) thread_.join();
}

void BackgroundSave::run() {
  dist::use_one_thread_here();  // the training threads keep the cores
  common::save_delay_point("copy");
  {
    RECORD_USER_SCOPE("checkpoint.copy");
    save_->copy_to_host(buffers_);
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    copied_ = true;
  }
  copied_signal_.notify_all();
  common::save_delay_point("write");
  {
    RECORD_USER_SCOPE("checkpoint.write");
    save_->write();
  }
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

std::string BackgroundSave::commit() {
  if (thread_.joinable()) thread_.join();
  return save_->commit();
}

}  // namespace shardtune::checkpoint
