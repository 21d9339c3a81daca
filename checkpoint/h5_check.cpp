// HDF5 error reporting: turns HDF5's per-thread error stack into the message of a typed error.
#include "checkpoint/h5_check.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <hdf5.h>

#include <string_view>
#include <vector>

#include "common/error.h"

namespace shardtune::checkpoint {
namespace {

herr_t collect_entry(unsigned /*n*/, const H5E_error2_t* err, void* client_data) {
  auto* entries = static_cast<std::vector<std::string>*>(client_data);
  std::string_view func = err->func_name != nullptr ? err->func_name : "?";
  const std::string_view raw = err->desc != nullptr ? err->desc : "";
  // Some descriptions embed ctime() output, newline included; keep the message on one line.
  std::string desc;
  for (size_t i = 0; i < raw.size(); ++i) {
    if (raw[i] != '\n') desc += raw[i];
    else if (i + 1 < raw.size() && raw[i + 1] != ',') desc += ' ';
  }
  // The API function is named H5Fopen, internal ones H5F_open: the C name says where in HDF5.
  entries->push_back(fmt::format("{}(): {}", func, desc));
  return 0;
}

}  // namespace

std::string take_hdf5_error_stack() {
  std::vector<std::string> entries;
  // Downward: begins at the API function and ends at the innermost one, as H5Eprint2 lists it.
  // H5Ewalk2 does not clear the stack on entry, unlike the rest of the API.
  if (H5Ewalk2(H5E_DEFAULT, H5E_WALK_DOWNWARD, collect_entry, &entries) < 0) {
    return "(the HDF5 error stack could not be read)";
  }
  H5Eclear2(H5E_DEFAULT);
  if (entries.empty()) return "(HDF5 recorded no error stack)";
  return fmt::format("{}", fmt::join(entries, "; "));
}

void raise_hdf5(const char* expr, const std::source_location& loc) {
  common::raise(common::ErrorKind::kHdf5, fmt::format("{} failed: {}", expr, take_hdf5_error_stack()), loc);
}

void silence_hdf5_auto_print() { ST_H5_CHECK(H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr)); }

void close_hdf5() { H5close(); }

}  // namespace shardtune::checkpoint
