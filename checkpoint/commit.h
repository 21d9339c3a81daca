// How a checkpoint becomes visible, for training and for every tool alike. Files are written into
// a temporary directory whose name no other writer uses; every file is closed and fsynced; the
// manifest is written last (an AtomicFile); the directory is fsynced and renamed to step-NNNNNNN
// (a committed checkpoint already under that name is swapped out in one atomic rename and only
// then removed); `latest` moves to it atomically; then older checkpoints are pruned. A crash at any
// point leaves either the new checkpoint committed or the previous state intact. Failures after
// the rename (pruning, cleaning up) do not undo the commit: they come back as warnings.
//
// A directory holds one history, and its newest checkpoint is the one committed last. Each commit
// is numbered in its manifest, one more than any checkpoint committed in the directory before it;
// committing step N sets aside (renames, never deletes) committed checkpoints of steps above N, the
// history a rollback left (a run resumed from an older checkpoint). The ranks resume the newest
// first (committed_checkpoints), and the batch script counts a start as progress when the newest
// commit number grew (newest_position, through `shardtune checkpoint-position`): one rule, here.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "checkpoint/manifest.h"
#include "common/pending_folder.h"

namespace shardtune::checkpoint {

// "step-0000400"; a step past 9,999,999 takes more digits.
std::string step_dir_name(int64_t step);
// The step of a checkpoint directory's name ("step-" and digits), or nullopt.
std::optional<int64_t> step_of_dir_name(const std::string& name);

class PendingCheckpoint {
 public:
  // Creates <root>/.tmp-step-NNNNNNN-<host>-<pid>-<n> (and root). Throws common::Error(kIo).
  PendingCheckpoint(std::string root, int64_t step);
  // Removes the temporary directory unless committed; never throws.
  ~PendingCheckpoint();
  PendingCheckpoint(const PendingCheckpoint&) = delete;
  PendingCheckpoint& operator=(const PendingCheckpoint&) = delete;

  const std::string& dir() const { return dir_; }  // where the files go
  const std::string& root() const { return root_; }
  int64_t started_ns() const { return started_ns_; }  // what prune_checkpoints' older_than_ns takes

  struct Committed {
    std::string dir;                    // <root>/step-NNNNNNN
    std::vector<std::string> warnings;  // what went wrong after the commit (pruning, cleanup)
    std::vector<std::string> set_aside;  // what was set aside (later steps, the same step's old folder), where and why
  };
  // Writes the manifest, fsyncs, renames into place, moves `latest`, prunes to `keep_last`
  // committed checkpoints (0: none pruned). Throws common::Error(kIo) if nothing was committed.
  Committed commit(const Manifest& manifest, int64_t keep_last);

 private:
  std::string root_;
  int64_t step_;
  std::string dir_;
  int64_t started_ns_;  // when this save began: uncommitted directories older than that are leftovers
  bool committed_ = false;
};

// A checkpoint directory of the tools (consolidate, reshard, import-hf), which name their output:
// files go into a temporary sibling directory; commit() writes the manifest last and renames the
// directory to `final_dir`, which must not exist or be empty (a tool never replaces a checkpoint).
class PendingDirectory {
 public:
  explicit PendingDirectory(std::string final_dir);  // throws common::Error(kIo) if final_dir holds anything
  const std::string& dir() const { return folder_.path(); }
  void commit(const Manifest& manifest);

 private:
  common::PendingFolder folder_;  // removes the temporary directory unless committed
};

// Removes committed checkpoints beyond the `keep_last` most recently committed ones; never `keep`
// (the one just committed) nor one committed after it; and removes leftovers of saves that died
// (temporary directories untouched since before `older_than_ns`). Returns what could not be done.
std::vector<std::string> prune_checkpoints(const std::string& root, int64_t keep_last, const std::string& keep,
                                           int64_t older_than_ns);

// Points `root`/latest at the step folder `name` (atomically); the problem, if it could not.
std::optional<std::string> point_latest_at(const std::string& root, const std::string& name);

// The most recently committed checkpoint under `root` whose manifest is sound (others are
// skipped with a warning), or nullopt.
std::optional<std::string> find_latest_checkpoint(const std::string& root);

// Every committed checkpoint under `root` (a directory step-N holding a manifest), newest first:
// by commit number (a checkpoint from before commit numbers, or one whose manifest does not read,
// counts its step), then by step.
std::vector<std::string> committed_checkpoints(const std::string& root);

// The folder `path` names, its links resolved once: `latest` becomes the step folder it points at
// now, so that a tool reads one checkpoint, manifest and files alike, even while a job moves
// `latest` on. `path` as given when it does not resolve (the error then names it).
std::string pinned_dir(const std::string& path);

// Step folders under `root` without a manifest (a save that died after its rename, or a checkpoint
// whose manifest was lost): never resumed; a save of the same step sets them aside.
std::vector<std::string> uncommitted_step_dirs(const std::string& root);

struct CheckpointPosition {
  std::string dir;     // empty when there is none
  int64_t step = 0;
  int64_t commit = 0;  // 0 when there is none
};
// The newest committed checkpoint whose manifest reads: what a start resumes.
CheckpointPosition newest_position(const std::string& root);

}  // namespace shardtune::checkpoint
