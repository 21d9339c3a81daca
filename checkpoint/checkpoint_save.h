// A checkpoint save in parts, so that its files can be written while training goes on
// ([checkpoint] async); save_checkpoint (sharded_checkpoint.h) runs the parts one after another.
//   1. The constructor (collective over the world, at a step boundary): world rank 0 opens the
//      temporary directory (for a full checkpoint, lays out model.h5 too) and every rank notes the
//      training state and what it writes: its units, the live shards and moments.
//   2. copy_to_host (this rank alone, any thread), for shards on a GPU: the units copied into host
//      buffers that outlive the save; from then on training may change the shards and moments.
//   3. write (this rank alone, no collectives, any thread): the rank's file, or its pieces of the
//      full one, from the copies or straight from shards in host memory; it says when it no longer
//      reads them (after its final sync: the disk reads a rank file's shards in place). A failure
//      is kept for commit, never thrown. (A full checkpoint whose writers are on several hosts
//      gathers each unit to world rank 0 instead: its write is collective and runs on every rank's
//      main thread; writes_alone() is false.)
//   4. commit (collective): if any rank's write failed, every rank throws one error naming each
//      and nothing is committed; else world rank 0 writes the manifest and commits.
// Destroying an uncommitted save removes its temporary directory. HDF5 is built without thread
// safety: while one thread writes, no other may call HDF5 (training does not between saves).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "checkpoint/commit.h"
#include "checkpoint/full_file.h"
#include "checkpoint/manifest.h"
#include "checkpoint/sharded_checkpoint.h"
#include "runtime/dist/process_groups.h"

namespace shardtune::checkpoint {

class UpdateCrcs;  // update_crcs.h

class CheckpointSave {
 public:
  // Begins a save of `state` (sharded_checkpoint.h's SaveRequest says where and how).
  CheckpointSave(fsdp::FsdpLlama& model, fsdp::Optimizer* optimizer, const TrainingState& state,
                 dist::ProcessGroups& groups, const SaveRequest& request);
  ~CheckpointSave();
  CheckpointSave(const CheckpointSave&) = delete;
  CheckpointSave& operator=(const CheckpointSave&) = delete;

  int64_t step() const { return manifest_.step; }
  // <root>/step-NNNNNNN, once committed.
  std::string dir() const;
  bool writes_alone() const { return !gather_; }
  // Bytes of this rank's state the save writes (0 on a rank that writes nothing): the host memory
  // copy_to_host needs.
  int64_t host_bytes() const;
  // Whether the state must be copied to host memory before training may change it (shards on a
  // GPU); else write() reads the shards themselves.
  bool copies_to_host() const;
  // Copies this rank's units into `buffers` (host memory, pinned when a unit is on a GPU),
  // reusing them where they already fit; the write reads the copies. Like write, it keeps a
  // failure for commit (and the write is then skipped).
  void copy_to_host(std::vector<at::Tensor>& buffers);
  // `released` (may be empty) is called once, when the write no longer reads the units' tensors
  // (also when it fails).
  void write(const std::function<void()>& released = nullptr);
  // Throws common::Error on every rank when any rank's write failed or the commit did. With a
  // `pruner`, world rank 0 waits for its last pruning first and has it prune after this commit,
  // on its thread, instead of pruning here.
  std::string commit(class Pruner* pruner = nullptr);

 private:
  dist::ProcessGroups& groups_;
  fsdp::FsdpLlama& model_;
  fsdp::Optimizer* optimizer_;
  std::string root_;
  int64_t keep_last_;
  bool consolidated_, adapters_only_, split_, writer_, gather_ = false;
  int world_rank_;
  Manifest manifest_;                        // everything but the slices, as of the step boundary
  std::optional<PendingCheckpoint> pending_;  // world rank 0's temporary directory
  std::string tmp_dir_;
  std::vector<FullUnit> units_;              // this rank's, when it writes
  std::vector<int64_t> offsets_;             // a full file written side by side: where each tensor goes
  std::string records_;                      // what the write produced, for the manifest
  std::exception_ptr failure_;
};

}  // namespace shardtune::checkpoint
