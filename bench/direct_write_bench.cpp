// What writing a rank's checkpoint costs the CPU, piece by piece: copying it into aligned buffers,
// its block checksums (CRC-32, libdeflate's, as checkpoint/crc32.cpp), and O_DIRECT writes from
// memory on ordinary pages and on transparent huge pages. The CPU time
// of each (user + system, of this process) and its wall time, for MiB of data written to FILE in
// pieces of CHUNK_MIB. bench/async_ckpt.sh measures the whole save; this, its parts.
// usage: direct_write_bench MIB FILE [CHUNK_MIB]
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <libdeflate.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace {

struct Clock {
  double cpu = 0, sys = 0, wall = 0;
  static Clock now() {
    rusage r{};
    ::getrusage(RUSAGE_SELF, &r);
    const double sys = static_cast<double>(r.ru_stime.tv_sec) + static_cast<double>(r.ru_stime.tv_usec) * 1e-6;
    const double user = static_cast<double>(r.ru_utime.tv_sec) + static_cast<double>(r.ru_utime.tv_usec) * 1e-6;
    return {user + sys, sys,
            std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count()};
  }
};

void print(const char* what, const Clock& a) {
  const Clock b = Clock::now();
  std::printf("%-44s CPU %.3f s (system %.3f s), wall %.3f s\n", what, b.cpu - a.cpu, b.sys - a.sys, b.wall - a.wall);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: direct_write_bench MIB FILE [CHUNK_MIB]\n");
    return 2;
  }
  const size_t bytes = std::strtoull(argv[1], nullptr, 10) << 20;
  const char* path = argv[2];
  const size_t chunk = (argc > 3 ? std::strtoull(argv[3], nullptr, 10) : 16) << 20;
  constexpr size_t kHuge = size_t(2) << 20;
  if (bytes == 0 || chunk == 0 || bytes % chunk != 0) {
    std::fprintf(stderr, "direct_write_bench: MIB must be a positive multiple of CHUNK_MIB\n");
    return 2;
  }
  for (const bool huge : {false, true}) {
    auto* src = static_cast<char*>(std::aligned_alloc(kHuge, bytes));
    auto* buffer = static_cast<char*>(std::aligned_alloc(kHuge, chunk));
    if (src == nullptr || buffer == nullptr) return 1;
    ::madvise(src, bytes, huge ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
    ::madvise(buffer, chunk, huge ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
    std::memset(src, 1, bytes);
    std::memset(buffer, 0, chunk);
    const std::string pages = huge ? "huge pages" : "4 KiB pages";
    Clock t = Clock::now();
    for (size_t at = 0; at < bytes; at += chunk) std::memcpy(buffer, src + at, chunk);
    print(("copy into a buffer, " + pages).c_str(), t);
    t = Clock::now();
    const uint32_t crc = libdeflate_crc32(0, src, bytes);
    print(("CRC-32, " + pages).c_str(), t);
    if (crc == 0) std::printf("(a CRC of 0)\n");  // keeps the sum from being optimised away
    const int fd = ::open(path, O_WRONLY | O_CREAT | O_TRUNC | O_DIRECT, 0644);
    if (fd < 0) {
      std::perror(path);
      return 1;
    }
    t = Clock::now();
    for (size_t at = 0; at < bytes; at += chunk) {
      if (::pwrite(fd, src + at, chunk, static_cast<off_t>(at)) != static_cast<ssize_t>(chunk)) {
        std::perror("pwrite");
        return 1;
      }
    }
    ::fdatasync(fd);
    print(("O_DIRECT write + fdatasync, " + pages).c_str(), t);
    ::close(fd);
    ::unlink(path);
    std::free(src);
    std::free(buffer);
  }
  return 0;
}
