// Files read through mmap fault with SIGBUS when another process truncates them while they are
// mapped, and the process would die of a bare signal. Every mapping is registered here; a SIGBUS
// inside a registered mapping prints which file shrank and what to do, and the process exits with
// status 1 instead. A SIGBUS anywhere else is left to the default action.
#pragma once

#include <cstddef>
#include <string>

namespace shardtune::common {

// Registers [base, base + size) as a mapping of `path` (installing the handler once). Returns a
// slot to release; -1 when every slot is taken (that mapping is then unguarded).
int guard_mapping(const void* base, size_t size, const std::string& path);
void release_mapping(int slot);

}  // namespace shardtune::common
