// Opening a dataset of a checkpoint file, refusing what could make a read reach outside that
// file: an external link on the path (H5L_TYPE_EXTERNAL), a soft link, a dataset stored in
// external raw files, or a virtual dataset mapped onto other files. A checkpoint's files are
// written by shardtune and hold their data themselves; anything else was made by someone else.
#pragma once

#include <hdf5.h>

#include <string>

#include "checkpoint/h5_handle.h"

namespace shardtune::checkpoint {

// Opens /<group>/<name>. Throws common::Error(kIo) saying what was refused, or kHdf5 when it is
// not there.
H5Handle open_checked_dataset(hid_t file, const std::string& group, const std::string& name);

// File access properties without HDF5's file locks, which fail on some parallel filesystems.
H5Handle unlocked_file_access();

// Creates a new checkpoint file (never an existing one: H5F_ACC_EXCL) without file locks; with
// `alignment` > 0, each object of at least that size starts at a multiple of it (for direct I/O).
H5Handle create_checkpoint_file(const std::string& path, int64_t alignment = 0);

// Creates the group /<name> of a new file.
H5Handle create_group(hid_t file, const std::string& name);

// Dataset creation properties for datasets written in place by other writers: contiguous, their
// space allocated at creation and never filled, so the writers' bytes are the only ones.
H5Handle contiguous_unfilled_dataset();

// Opens a checkpoint file read-only with `fapl`. Throws common::Error(kIo) naming it: out of file
// descriptors (naming the limit, common/open_files.h), or not readable as HDF5.
H5Handle open_checkpoint_file(const std::string& path, hid_t fapl);

}  // namespace shardtune::checkpoint
