// Every HDF5 call goes through ST_H5_CHECK: a negative return (herr_t, hid_t, htri_t) throws
// common::Error(kHdf5) with the call, HDF5's own error stack, host, rank and file:line.
#pragma once

#include <concepts>
#include <source_location>
#include <string>

namespace shardtune::checkpoint {

// HDF5's current error stack of this thread as one line, outermost (the API call) first and the
// innermost function, where the error was detected, last; the stack is cleared afterwards.
// "(HDF5 recorded no error stack)" when it is empty.
std::string take_hdf5_error_stack();

// Throws Error(kHdf5) naming `expr` and the error stack.
[[noreturn]] void raise_hdf5(const char* expr, const std::source_location& loc);

// Returns `rc` (an id, a count, a tri-state) when it signals success, that is when it is not
// negative.
template <std::signed_integral T>
T check_h5(T rc, const char* expr, const std::source_location& loc) {
  if (rc < 0) raise_hdf5(expr, loc);
  return rc;
}

// Stops HDF5 printing its error stack to stderr on every failure: ST_H5_CHECK reports the stack in
// the exception, on the rank that failed, instead. Call once per process, before other HDF5 calls.
void silence_hdf5_auto_print();

// Closes every HDF5 object still open and the library itself (H5close): for a program's end when it
// leaves without running static destructors (common/process_exit.h), which would otherwise do it.
void close_hdf5();

}  // namespace shardtune::checkpoint

#define ST_H5_CHECK(expr) ::shardtune::checkpoint::check_h5((expr), #expr, std::source_location::current())
