// Datasets opened only when they hold their own data.
#include "checkpoint/h5_dataset.h"

#include <fmt/format.h>

#include <cerrno>

#include "checkpoint/h5_check.h"
#include "common/error.h"
#include "common/open_files.h"

namespace shardtune::checkpoint {
namespace {

using common::ErrorKind;

// `path` must exist as a hard link: no external file, no symbolic path.
void require_hard_link(hid_t file, const std::string& path) {
  const htri_t exists = H5Lexists(file, path.c_str(), H5P_DEFAULT);
  ST_CHECK(exists > 0, ErrorKind::kIo, "{} is not in the file", path);
  H5L_info_t info{};
  ST_H5_CHECK(H5Lget_info(file, path.c_str(), &info, H5P_DEFAULT));
  ST_CHECK(info.type == H5L_TYPE_HARD, ErrorKind::kIo, "{} is {}, not a dataset of this file: refused", path,
           info.type == H5L_TYPE_EXTERNAL ? "a link to another file" : "a soft link");
}

}  // namespace

H5Handle unlocked_file_access() {
  H5Handle fapl(ST_H5_CHECK(H5Pcreate(H5P_FILE_ACCESS)), H5Pclose);
  ST_H5_CHECK(H5Pset_file_locking(fapl.get(), false, true));
  return fapl;
}

H5Handle create_checkpoint_file(const std::string& path, int64_t alignment) {
  H5Handle fapl = unlocked_file_access();
  if (alignment > 0)
    ST_H5_CHECK(H5Pset_alignment(fapl.get(), static_cast<hsize_t>(alignment), static_cast<hsize_t>(alignment)));
  return H5Handle(ST_H5_CHECK(H5Fcreate(path.c_str(), H5F_ACC_EXCL, H5P_DEFAULT, fapl.get())), H5Fclose);
}

H5Handle create_group(hid_t file, const std::string& name) {
  return H5Handle(ST_H5_CHECK(H5Gcreate2(file, ("/" + name).c_str(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT)), H5Gclose);
}

H5Handle contiguous_unfilled_dataset() {
  H5Handle dcpl(ST_H5_CHECK(H5Pcreate(H5P_DATASET_CREATE)), H5Pclose);
  ST_H5_CHECK(H5Pset_layout(dcpl.get(), H5D_CONTIGUOUS));
  ST_H5_CHECK(H5Pset_alloc_time(dcpl.get(), H5D_ALLOC_TIME_EARLY));
  ST_H5_CHECK(H5Pset_fill_time(dcpl.get(), H5D_FILL_TIME_NEVER));
  return dcpl;
}

H5Handle open_checkpoint_file(const std::string& path, hid_t fapl) {
  errno = 0;
  const hid_t id = H5Fopen(path.c_str(), H5F_ACC_RDONLY, fapl);
  if (id >= 0) return H5Handle(id, H5Fclose);
  const int error = errno;
  const std::string stack = take_hdf5_error_stack();
  if (error == EMFILE || error == ENFILE) common::raise(ErrorKind::kIo, common::open_failure(path, error));
  common::raise(ErrorKind::kIo, fmt::format("cannot open {} (truncated or not HDF5?): {}", path, stack));
}

H5Handle open_checked_dataset(hid_t file, const std::string& group, const std::string& name) {
  const std::string group_path = "/" + group, path = group_path + "/" + name;
  require_hard_link(file, group_path);
  require_hard_link(file, path);
  H5Handle ds(ST_H5_CHECK(H5Dopen2(file, path.c_str(), H5P_DEFAULT)), H5Dclose);
  H5Handle dcpl(ST_H5_CHECK(H5Dget_create_plist(ds.get())), H5Pclose);
  ST_CHECK(ST_H5_CHECK(H5Pget_external_count(dcpl.get())) == 0, ErrorKind::kIo,
           "{} keeps its data in external files: refused", path);
  ST_CHECK(H5Pget_layout(dcpl.get()) != H5D_VIRTUAL, ErrorKind::kIo,
           "{} is a virtual dataset mapped onto other files: refused", path);
  return ds;
}

}  // namespace shardtune::checkpoint
