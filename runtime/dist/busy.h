// Work a rank does alone while the others may wait for it in a collective: a commit, a write of
// its checkpoint files, a hash of a base model. The work runs on a thread of its own while this
// thread, the one that calls MPI, answers every watchdog's census "busy with <what>"
// (watchdog.h), so the waiting ranks wait as long as the work takes instead of naming this one
// lost; one that dies or hangs answers nothing and is named lost as before.
#pragma once

#include <functional>
#include <string>

namespace shardtune::dist {

// Runs `work` to its end and rethrows what it threw. `work` must not call MPI (the thread level
// may be MPI_THREAD_FUNNELED) nor rely on this thread's CUDA device.
void while_busy(const std::string& what, const std::function<void()>& work);

}  // namespace shardtune::dist
