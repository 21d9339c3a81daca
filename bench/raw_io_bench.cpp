// The raw disk doing a conversion's I/O and nothing else: reads every INPUT file whole, as the
// tools read (common::ReadAhead: O_DIRECT, two reads in flight), while another thread writes
// OUT_BYTES of zeros to OUT as the tools write (common::DirectWriter: O_DIRECT through aligned
// buffers, then fdatasync). Prints the wall time; bench/ckpt.sh divides a command's time by it.
// The page cache is emptied of the inputs first (POSIX_FADV_DONTNEED); OUT is removed after.
// usage: raw_io_bench OUT OUT_BYTES [INPUT...]
#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <algorithm>
#include <exception>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "common/aligned_vector.h"
#include "common/direct_file.h"
#include "common/read_ahead.h"

namespace sc = shardtune::common;

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: raw_io_bench OUT OUT_BYTES [INPUT...]\n");
    return 2;
  }
  try {
    const std::string out = argv[1];
    const int64_t out_bytes = std::atoll(argv[2]);
    std::vector<sc::ReadAhead::Range> ranges;
    int64_t in_bytes = 0;
    for (int i = 3; i < argc; ++i) {
      const int fd = ::open(argv[i], O_RDONLY);
      if (fd < 0) throw std::runtime_error(std::string("cannot open ") + argv[i]);
      const off_t size = ::lseek(fd, 0, SEEK_END);
      ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
      ::close(fd);
      ranges.push_back({argv[i], 0, size});
      in_bytes += size;
    }
    {
      const int fd = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      if (fd < 0 || ::ftruncate(fd, out_bytes) != 0) throw std::runtime_error("cannot create " + out);
      ::close(fd);
    }
    const auto start = std::chrono::steady_clock::now();
    std::exception_ptr write_error;
    std::thread writer([&] {
      try {
        constexpr int64_t kPiece = int64_t(32) << 20;
        sc::AlignedVector<char> zeros(static_cast<size_t>(kPiece));
        sc::DirectWriter file(out);
        for (int64_t at = 0; at < out_bytes; at += kPiece)
          file.write(zeros.data(), static_cast<size_t>(std::min(kPiece, out_bytes - at)), at);
        file.finish();
      } catch (...) {
        write_error = std::current_exception();
      }
    });
    {
      sc::ReadAhead ahead(ranges);
      for (size_t r = 0; r < ranges.size(); ++r)
        while (ahead.next(r, size_t(32) << 20).bytes > 0) {
        }
    }
    writer.join();
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    ::unlink(out.c_str());
    if (write_error) std::rethrow_exception(write_error);
    std::printf("%.3f s for %.2f GB read and %.2f GB written\n", seconds, static_cast<double>(in_bytes) / 1e9,
                static_cast<double>(out_bytes) / 1e9);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "raw_io_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
