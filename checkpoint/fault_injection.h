// Fault injection for the crash tests of the commit protocol: SHARDTUNE_TEST_KILL_AT set to
// "<phase>@<step>:<rank>" makes that rank SIGKILL itself when a save of that step reaches that
// phase (started, files-written, manifest-written, renamed, latest-updated); "*" as the step
// matches a save of any step. Unset in real runs.
#pragma once

#include <cstdint>

namespace shardtune::checkpoint {

void kill_point(const char* phase, int64_t step, int rank = 0);

}  // namespace shardtune::checkpoint
