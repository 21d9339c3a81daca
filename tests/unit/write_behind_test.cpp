// common::WriteBehind: random pieces written at random offsets through few small buffers land byte
// for byte where a plain pwrite() would put them; a failed write is thrown by the caller's next
// call, naming the file.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/write_behind.h"
#include "tests/unit/temp_dir.h"

namespace shardtune::common {
namespace {

TEST(WriteBehind, PiecesLandWhereTheyWereSent) {
  testing_support::TempDir dir;
  const std::string path = dir.file("out.bin");
  std::mt19937 rng(7);
  std::vector<char> expected(1 << 16, 0);
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  ASSERT_GE(fd, 0);
  {
    WriteBehind writes(2, 1000);  // fewer buffers than pieces: take() waits for the writer
    for (int i = 0; i < 300; ++i) {
      const size_t n = std::uniform_int_distribution<size_t>(1, 1000)(rng);
      const size_t at = std::uniform_int_distribution<size_t>(0, expected.size() - n)(rng);
      char* b = writes.take();
      for (size_t k = 0; k < n; ++k) b[k] = static_cast<char>(rng());
      std::memcpy(expected.data() + at, b, n);  // later pieces overwrite earlier ones, in order
      writes.put(b, n, fd, static_cast<int64_t>(at), path);
      // One writer thread, jobs in order: a piece overlapping an earlier one must see it written first.
    }
    writes.finish(fd, path);
  }
  ::close(fd);
  std::ifstream in(path, std::ios::binary);
  std::vector<char> got((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  got.resize(expected.size(), 0);  // bytes past the last piece were never written
  EXPECT_EQ(got, expected);
}

TEST(WriteBehind, AFailedWriteIsThrownNamingTheFile) {
  testing_support::TempDir dir;
  const std::string path = dir.file("read-only.bin");
  { std::ofstream(path) << "x"; }
  const int fd = ::open(path.c_str(), O_RDONLY);  // pwrite fails: EBADF
  ASSERT_GE(fd, 0);
  WriteBehind writes(1, 16);
  char* b = writes.take();
  writes.put(b, 4, fd, 0, path);
  try {
    writes.finish(fd, path);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
  }
  EXPECT_THROW(writes.take(), Error);  // and every later call
  ::close(fd);
}

}  // namespace
}  // namespace shardtune::common
