// common::WriteBehind: random pieces written at random offsets through few small buffers land byte
// for byte where a plain pwrite() would put them; a failed write is thrown by the caller's next
// call, naming the file. common::DirectWriter: disjoint pieces of any size at any offset (O_DIRECT
// for their aligned middles, buffered heads and tails) read back byte for byte, copied or written in
// place from the caller's memory, which is then the disk's source without a copy when its place in a
// page matches the file offset's.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "common/aligned_vector.h"
#include "common/direct_file.h"
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

// Disjoint pieces, as a laid-out file's datasets are: sizes from 1 byte to past a buffer (16 MiB),
// at offsets aligned and not, in a random order. In a directory on a disk (/var/tmp) when there is
// one, so that O_DIRECT is used; tmpfs refuses it and every byte goes the buffered way.
enum class Source { kCopied, kInPlace, kInPlaceOtherPhase };

void disjoint_pieces_read_back_exactly(Source source) {
  std::string pattern = std::filesystem::exists("/var/tmp") ? "/var/tmp/st-direct.XXXXXX" : "/tmp/st-direct.XXXXXX";
  ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
  const std::string path = pattern + "/out.bin";
  std::mt19937 rng(11);
  std::vector<std::pair<int64_t, int64_t>> pieces;  // offset, length
  int64_t at = 0;
  for (int i = 0; i < 40; ++i) {
    const int64_t gap = std::uniform_int_distribution<int64_t>(0, 3)(rng) == 0 ? 0 : std::uniform_int_distribution<int64_t>(0, 9000)(rng);
    const int64_t kinds[] = {1, 4095, 4096, 4097, 12288, 100000, (int64_t(16) << 20) + 12345};
    const int64_t n = i % 9 == 8 ? kinds[6] : kinds[std::uniform_int_distribution<int>(0, 5)(rng)] +
                                                  std::uniform_int_distribution<int64_t>(0, 1)(rng) * 7;
    at += gap;
    if (std::uniform_int_distribution<int>(0, 1)(rng) == 0) at = (at + 4095) / 4096 * 4096;  // some start aligned
    pieces.emplace_back(at, n);
    at += n;
  }
  // Page-aligned, so that expected.data() + offset lies where `offset` lies within a page; `shift`
  // moves the source 4 bytes off that place.
  const size_t shift = source == Source::kInPlaceOtherPhase ? 4 : 0;
  AlignedVector<char> memory(static_cast<size_t>(at) + shift, 0);
  std::span<char> expected(memory.data() + shift, static_cast<size_t>(at));  // the gaps stay as they were: zero
  for (const auto& [offset, n] : pieces)
    for (int64_t k = offset; k < offset + n; ++k) expected[static_cast<size_t>(k)] = static_cast<char>(rng());
  { std::ofstream(path, std::ios::binary).write(std::vector<char>(expected.size(), 0).data(), static_cast<std::streamsize>(expected.size())); }
  std::shuffle(pieces.begin(), pieces.end(), rng);
  bool direct = false;
  uint64_t in_place = 0;
  {
    DirectWriter out(path);
    direct = out.direct();
    for (const auto& [offset, n] : pieces) {
      if (source == Source::kCopied) {
        out.write(expected.data() + offset, static_cast<size_t>(n), offset);
      } else {
        out.write_in_place(expected.data() + offset, static_cast<size_t>(n), offset);
      }
    }
    out.finish();
    in_place = out.bytes_in_place();
  }
  std::ifstream in(path, std::ios::binary);
  std::vector<char> got((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  size_t bad = 0;
  while (bad < got.size() && bad < expected.size() && got[bad] == expected[bad]) ++bad;
  std::string where;
  for (const auto& [offset, n] : pieces)
    if (static_cast<int64_t>(bad) >= offset && static_cast<int64_t>(bad) < offset + n)
      where = std::to_string(offset) + "+" + std::to_string(n);
  EXPECT_TRUE(std::equal(got.begin(), got.end(), expected.begin(), expected.end())) << (direct ? "with O_DIRECT" : "buffered") << ": first difference at byte " << bad
                               << " of " << got.size() << " (piece " << where << ")";
  std::filesystem::remove_all(pattern);
  // In place only where the source's place in its page matches, and there for every aligned middle.
  if (source == Source::kInPlace && direct) {
    EXPECT_GT(in_place, uint64_t{16} << 20);
  } else {
    EXPECT_EQ(in_place, 0u);
  }
  std::printf("DirectWriter: %zu pieces, %zu bytes, %s, %llu bytes in place\n", pieces.size(), expected.size(),
              direct ? "O_DIRECT" : "buffered (O_DIRECT refused here)", static_cast<unsigned long long>(in_place));
}

TEST(DirectWriter, DisjointPiecesOfAnySizeReadBackExactly) { disjoint_pieces_read_back_exactly(Source::kCopied); }
TEST(DirectWriter, PiecesWrittenInPlaceReadBackExactly) { disjoint_pieces_read_back_exactly(Source::kInPlace); }
TEST(DirectWriter, PiecesElsewhereInTheirPageAreCopied) {
  disjoint_pieces_read_back_exactly(Source::kInPlaceOtherPhase);
}


}  // namespace
}  // namespace shardtune::common
