// How a checkpoint's bytes are best read on this machine, with ratios measured in the same run:
//   1. a cold read of FILE in 32 MiB pieces with pread() through the page cache, each piece
//      checksummed before the next is read (as the tools read through HDF5), against the same
//      bytes through common::ReadAhead (O_DIRECT, two reads in flight), checksummed alike;
//   2. a warm pread() into a buffer from malloc() (16 bytes into a page) against one into a
//      page-aligned buffer (common/aligned_vector.h): the kernel's copy out of the page cache.
// Each case's wall time and CPU time (user + system). The page cache is emptied before each cold
// read with POSIX_FADV_DONTNEED. usage: read_bench FILE [ROUNDS]
#include <fcntl.h>
#include <sys/resource.h>
#include <libdeflate.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "common/aligned_vector.h"
#include "common/read_ahead.h"

namespace {

constexpr size_t kPiece = size_t(32) << 20;

struct Clock {
  double user = 0, sys = 0, wall = 0;
  static Clock now() {
    rusage r{};
    ::getrusage(RUSAGE_SELF, &r);
    return {static_cast<double>(r.ru_utime.tv_sec) + static_cast<double>(r.ru_utime.tv_usec) * 1e-6,
            static_cast<double>(r.ru_stime.tv_sec) + static_cast<double>(r.ru_stime.tv_usec) * 1e-6,
            std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count()};
  }
};
struct Took {
  double wall, cpu, sys;
};
Took since(const Clock& a) {
  const Clock b = Clock::now();
  return {b.wall - a.wall, b.user - a.user + b.sys - a.sys, b.sys - a.sys};
}
void print(const char* what, const Took& t, double bytes) {
  std::printf("  %-52s %6.2f s  %5.2f GB/s  CPU %5.2f s (system %5.2f s)\n", what, t.wall, bytes / t.wall / 1e9, t.cpu,
              t.sys);
}

void drop_cache(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return;
  ::fdatasync(fd);
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
}

int64_t file_size(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return -1;
  const off_t size = ::lseek(fd, 0, SEEK_END);
  ::close(fd);
  return size;
}

// Where `p` lies in its 64-byte cache line.
size_t line_offset(const void* p) { return reinterpret_cast<uintptr_t>(p) % 64; }

uint32_t checksum(const void* data, size_t bytes, uint32_t crc) {
  return static_cast<uint32_t>(libdeflate_crc32(crc, data, bytes));
}

// Reads the whole file with pread() into `buffer`, checksumming each piece when `check`.
uint32_t pread_all(const std::string& path, char* buffer, bool check) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  uint32_t crc = 0;
  off_t at = 0;
  for (ssize_t n; (n = ::pread(fd, buffer, kPiece, at)) > 0; at += n)
    if (check) crc = checksum(buffer, static_cast<size_t>(n), crc);
  ::close(fd);
  return crc;
}

uint32_t read_ahead_all(const std::string& path, int64_t size) {
  shardtune::common::ReadAhead ahead({{path, 0, size}});
  uint32_t crc = 0;
  for (shardtune::common::ReadAhead::Piece p; (p = ahead.next(0, kPiece)).bytes > 0;) crc = checksum(p.data, p.bytes, crc);
  return crc;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: read_bench FILE [ROUNDS]\n");
    return 2;
  }
  const std::string path = argv[1];
  const int rounds = argc > 2 ? std::atoi(argv[2]) : 3;
  const int64_t size = file_size(path);
  if (size <= 0) {
    std::fprintf(stderr, "read_bench: cannot read %s\n", path.c_str());
    return 1;
  }
  const auto bytes = static_cast<double>(size);
  shardtune::common::AlignedVector<char> aligned(kPiece);
  std::printf("%s: %.2f GB, %d rounds\n", path.c_str(), bytes / 1e9, rounds);
  double plain_wall = 0, ahead_wall = 0, malloc_sys = 0, aligned_sys = 0;
  std::vector<char> from_malloc(kPiece);  // operator new: malloc()
  const size_t malloc_offset = line_offset(from_malloc.data());
  for (int r = 0; r < rounds; ++r) {
    drop_cache(path);
    Clock c = Clock::now();
    const uint32_t a = pread_all(path, aligned.data(), true);
    const Took plain = since(c);
    print("cold: pread() 32 MiB pieces, checksummed between reads", plain, bytes);
    drop_cache(path);
    c = Clock::now();
    const uint32_t b = read_ahead_all(path, size);
    const Took ahead = since(c);
    print("cold: ReadAhead (O_DIRECT, 2 in flight), checksummed", ahead, bytes);
    if (a != b) {
      std::fprintf(stderr, "read_bench: the two reads disagree (CRC %08x vs %08x)\n", a, b);
      return 1;
    }
    plain_wall += plain.wall;
    ahead_wall += ahead.wall;

    pread_all(path, aligned.data(), false);  // warm the page cache
    c = Clock::now();
    pread_all(path, from_malloc.data(), false);
    const Took unaligned = since(c);
    print("warm: pread() into malloc()'s buffer", unaligned, bytes);
    c = Clock::now();
    pread_all(path, aligned.data(), false);
    const Took page = since(c);
    print("warm: pread() into a page-aligned buffer", page, bytes);
    malloc_sys += unaligned.sys;
    aligned_sys += page.sys;
  }
  std::printf("cold read, time: pread() / ReadAhead = %.2f (mean of %d)\n", plain_wall / ahead_wall, rounds);
  std::printf("warm read, system time: malloc()'s buffer / page-aligned = %.2f (malloc()'s buffer starts at %zu mod 64)\n",
              malloc_sys / aligned_sys, malloc_offset);
  return 0;
}
