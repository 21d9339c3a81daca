// A checkpoint save ([checkpoint] async) whose copy and write run on a thread of their own while
// training goes on (checkpoint_save.h has the parts). Shards on a GPU are first copied into host
// buffers, then written from there; shards in host memory are written as they are, the disk reading
// them in place, so a save needs no second copy of the state there. Either way the
// training step must call wait_for_copy() before its optimizer update changes the shards and
// moments: it returns once they are copied, or read. The ranks commit together, at a step
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

// Pruning older checkpoints after a background save commits, on a thread of its own (deleting
// gigabytes takes a while, more on file systems that discard freed blocks at once): world rank 0
// starts it, and the next commit, and the end, wait for it.
class Pruner {
 public:
  ~Pruner() { wait(); }
  // prune_checkpoints(root, keep_last, keep, older_than_ns), its problems logged as warnings.
  void start(std::string root, int64_t keep_last, std::string keep, int64_t older_than_ns);
  void wait();

 private:
  std::thread thread_;
};

class BackgroundSave {
 public:
  // Starts the thread. `buffers` (host copies, kept between saves to be reused) must outlive it.
  BackgroundSave(std::unique_ptr<CheckpointSave> save, std::vector<at::Tensor>& buffers);
  // Waits for the thread; a save not committed by then is discarded (its temporary directory removed).
  ~BackgroundSave();
  BackgroundSave(const BackgroundSave&) = delete;
  BackgroundSave& operator=(const BackgroundSave&) = delete;

  int64_t step() const { return save_->step(); }
  // Once the thread is done (after commit): its seconds copying and writing, wall clock and CPU.
  struct Times {
    double copy = 0, copy_cpu = 0, write = 0, write_cpu = 0;
  };
  Times times() const { return times_; }
  // Returns once the state is copied or read: from then on training may change it.
  void wait_for_copy();
  // Collective over `world`: whether every rank's write is done.
  bool written(dist::Communicator& world);
  // Collective: waits for this rank's write, then commits (CheckpointSave::commit), older
  // checkpoints pruned by `pruner`. Returns the committed directory; throws on every rank if any
  // rank's copy or write failed.
  std::string commit(Pruner& pruner);

 private:
  void run();

  std::unique_ptr<CheckpointSave> save_;
  std::vector<at::Tensor>& buffers_;
  std::mutex mutex_;
  std::condition_variable copied_signal_;
  bool copied_ = false, done_ = false;
  Times times_;
  std::thread thread_;  // last: started once the rest is set
};

}  // namespace shardtune::checkpoint
