// Unfinished outputs removed when a tool is interrupted: a conversion stopped by Ctrl-C, TERM or a
// closed terminal leaves no full-size temporary folder or file behind. PendingFolder and
// AtomicFile register their temporaries here while they are uncommitted; a tool calls
// remove_temporaries_on_interrupt() once, and its handler then removes every registered one (with
// async-signal-safe calls only) before the signal ends the process as it would have.
#pragma once

#include <string>

namespace shardtune::common {

// Installs handlers for SIGINT, SIGTERM and SIGHUP, where their action is the default one (a
// program's own stop handlers stay). For tools, not for the ranks.
void remove_temporaries_on_interrupt();

// Registers `path` (a folder or file) as unfinished; returns a handle for forget_temporary, or -1
// when the registry is full (the path is then not removed on an interrupt).
int register_temporary(const std::string& path);
void forget_temporary(int handle);

}  // namespace shardtune::common
