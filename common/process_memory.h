// This process's resident memory from /proc/self/status (Linux): current and peak, and a reset
// of the peak, for memory bounds in tests, benchmarks and logs.
#pragma once

#include <cstdint>

namespace shardtune::common {

int64_t resident_bytes();       // VmRSS
int64_t peak_resident_bytes();  // VmHWM: the peak since start or since reset_peak_resident()
void reset_peak_resident();     // writes 5 to /proc/self/clear_refs (Linux 4.0+)
// This machine's memory from /proc/meminfo: key "MemTotal:" or "MemAvailable:"; 0 when unreadable.
int64_t machine_memory_bytes(const char* key);

// Whether this program's malloc is tcmalloc (gperftools' minimal build), as the ranks link it:
// under glibc's heap a rank's resident memory rose 0.5 to 1.2 GiB above the most its tensors held
// at once, and kept growing from step to step (docs/planner.md).
bool malloc_is_tcmalloc();

// For training processes under glibc's malloc (tcmalloc keeps freed spans by itself): freed
// blocks up to 1 GiB stay in the heap for the next step instead of going back to the system.
// glibc returns blocks above its mmap threshold (at most 32 MiB) to the system on free and trims
// the heap's top, so each CPU training step page-faulted its activations, logits and gradients in
// again, zero-filled by the kernel (1.21x the tokens/s of a 0.12B model on the CPU with this,
// docs/design.md). Not for shardtune-ckpt, whose bounded memory wants freed pieces returned.
void keep_freed_host_memory();

// Returns the heap's free memory to the system now (malloc_trim, or tcmalloc's
// ReleaseFreeMemory): once, where a phase that will not come back (loading the weights, resuming
// a checkpoint) has freed its buffers and the heap would otherwise keep them for the whole run.
void release_freed_host_memory();

}  // namespace shardtune::common
