// A std::vector whose storage starts on a page boundary, for the buffers that reads land in.
//
// On some x86 CPUs (the AMD EPYC of these machines among them) a `rep movsb` copy whose
// destination is not 32-byte aligned runs many times slower than an aligned one. Both the kernel's
// copy from the page cache into a read() buffer and glibc's memcpy of a few KiB to a few hundred
// KiB use it, and malloc's large blocks start 16 bytes into a page: a pread into a plain
// std::vector<float> cost here about six times the system time of the same pread into an aligned
// one (bench/read_bench).
#pragma once

#include <cstddef>
#include <cstdlib>
#include <new>
#include <vector>

namespace shardtune::common {

inline constexpr size_t kBufferAlignment = 4096;

template <class T>
struct PageAlignedAllocator {
  using value_type = T;
  PageAlignedAllocator() = default;
  template <class U>
  PageAlignedAllocator(const PageAlignedAllocator<U>&) noexcept {}
  T* allocate(size_t n) {
    if (n > static_cast<size_t>(-1) / sizeof(T) - kBufferAlignment) throw std::bad_array_new_length();
    const size_t bytes = (n * sizeof(T) + kBufferAlignment - 1) / kBufferAlignment * kBufferAlignment;
    void* p = std::aligned_alloc(kBufferAlignment, bytes == 0 ? kBufferAlignment : bytes);
    if (p == nullptr) throw std::bad_alloc();
    return static_cast<T*>(p);
  }
  void deallocate(T* p, size_t) noexcept { std::free(p); }
  template <class U>
  bool operator==(const PageAlignedAllocator<U>&) const noexcept {
    return true;
  }
};

template <class T>
using AlignedVector = std::vector<T, PageAlignedAllocator<T>>;

}  // namespace shardtune::common
