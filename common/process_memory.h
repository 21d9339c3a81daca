// This process's resident memory from /proc/self/status (Linux): current and peak, and a reset
// of the peak, for memory bounds in tests, benchmarks and logs.
#pragma once

#include <cstdint>

namespace shardtune::common {

int64_t resident_bytes();       // VmRSS
int64_t peak_resident_bytes();  // VmHWM: the peak since start or since reset_peak_resident()
void reset_peak_resident();     // writes 5 to /proc/self/clear_refs (Linux 4.0+)

// For training processes: freed blocks up to 1 GiB stay in the heap for the next step instead of
// going back to the system. glibc returns blocks above its mmap threshold (at most 32 MiB) to the
// system on free and trims the heap's top, so each CPU training step page-faulted its activations,
// logits and gradients in again, zero-filled by the kernel (1.21x the tokens/s of a 0.12B model
// on the CPU with this, docs/design.md). Peak memory stays what a step needs; the heap keeps it
// between steps. Not for shardtune-ckpt, whose bounded memory wants freed pieces returned.
void keep_freed_host_memory();

// Returns the heap's free memory to the system now (malloc_trim): once, where a phase that will
// not come back (loading the weights, resuming a checkpoint) has freed its buffers and the heap
// would otherwise keep them for the whole run under keep_freed_host_memory.
void release_freed_host_memory();

}  // namespace shardtune::common
