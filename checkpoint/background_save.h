// A checkpoint save ([checkpoint] async) whose copy and write run on a thread of their own while
// training goes on (checkpoint_save.h has the parts). The thread first copies this rank's shards
// and moments into host buffers; the training step must call wait_for_copy() before its optimizer
// update changes them. Then it writes this rank's file. The ranks commit together, at a step
// boundary where every rank's write is done, or where training must wait for it (the next save,
// a stop, the end). Only a save whose write runs apart from the other ranks (writes_alone) can
// run here.
#pragma once

#include <ATen/core/Tensor.h>

#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "checkpoint/checkpoint_save.h"
#include "runtime/dist/communicator.h"

namespace shardtune::checkpoint {

class BackgroundSave {
 public:
  // Starts the thread. `buffers` (host copies, kept between saves to be reused) must outlive it.
  BackgroundSave(std::unique_ptr<CheckpointSave> save, std::vector<at::Tensor>& buffers);
  // Waits for the thread; a save not committed by then is discarded (its temporary directory removed).
  ~BackgroundSave();
  BackgroundSave(const BackgroundSave&) = delete;
  BackgroundSave& operator=(const BackgroundSave&) = delete;

  int64_t step() const { return save_->step(); }
  // Returns once the copy is taken: from then on training may change the shards and moments.
  void wait_for_copy();
  // Collective over `world`: whether every rank's write is done.
  bool written(dist::Communicator& world);
  // Collective: waits for this rank's write, then commits (CheckpointSave::commit). Returns the
  // committed directory; throws on every rank if any rank's copy or write failed.
  std::string commit();

 private:
  void run();

  std::unique_ptr<CheckpointSave> save_;
  std::vector<at::Tensor>& buffers_;
  std::mutex mutex_;
  std::condition_variable copied_signal_;
  bool copied_ = false, done_ = false;
  std::thread thread_;  // last: started once the rest is set
};

}  // namespace shardtune::checkpoint
