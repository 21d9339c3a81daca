// Huge pages for the ranks' heap. glibc's malloc can ask the kernel for transparent huge pages
// (madvise) on the heap it grows and on the blocks it maps (GLIBC_TUNABLES glibc.malloc.hugetlb=1).
// A rank then takes a 2 MiB page fault where it took 512 of 4 KiB: at start-up, while LibTorch
// registers its operators, and at every step, when large tensors are mapped afresh. shardtune's
// launcher and batch script start the ranks with it unless the environment already decides.
// glibc reads GLIBC_TUNABLES once, when a program starts: it cannot be set from inside a rank.
#pragma once

#include <string>
#include <string_view>

namespace shardtune::common {

inline constexpr const char* kMallocHugePagesTunable = "glibc.malloc.hugetlb";

// The GLIBC_TUNABLES value to start ranks with: `current` (the environment's, empty when unset)
// with glibc.malloc.hugetlb=1 added, or `current` unchanged where it already sets that tunable.
std::string tunables_with_huge_pages(std::string_view current);

// For a rank's log: what its malloc was started with, from GLIBC_TUNABLES (`tunables`, nullptr when
// unset) and the kernel's transparent huge page mode (`thp_mode`, the bracketed word of
// /sys/kernel/mm/transparent_hugepage/enabled; empty when unknown).
std::string malloc_pages_description(const char* tunables, std::string_view thp_mode);

// The kernel's transparent huge page mode ("always", "madvise", "never"), or "" when unreadable.
std::string transparent_huge_page_mode();

}  // namespace shardtune::common
