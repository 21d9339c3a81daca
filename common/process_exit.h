// The end of a program that loads LibTorch: once its own files, threads and MPI are closed, the
// process leaves without running the static destructors of LibTorch and the ~300 libraries Debian's
// LibTorch loads (OpenCV, FFmpeg, GDAL, ...): a tenth of the CPU time of a short rank or a
// shardtune-ckpt call, all of it freeing memory the kernel is about to take back.
#pragma once

namespace shardtune::common {

// Flushes and drops every spdlog logger, flushes C and C++ standard streams, then _Exit(code).
// Only for a program's last step: whatever still needs a destructor (an open file, a running
// thread) must be closed before.
[[noreturn]] void exit_after_flush(int code);

}  // namespace shardtune::common
