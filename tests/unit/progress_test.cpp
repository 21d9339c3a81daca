// Progress: its text worked by hand, plain lines no more often than asked, a bar redrawn in place
// within the terminal's width, on a clock stepped by the test.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <string>
#include <vector>

#include "common/progress.h"

namespace shardtune::common {
namespace {

using Clock = std::chrono::steady_clock;

// A clock the test moves.
struct FakeClock {
  Clock::time_point t{};
  void advance(double s) { t += std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s)); }
};

std::vector<std::string> split(const std::string& s, char c) {
  std::vector<std::string> out;
  size_t start = 0;
  for (size_t at; (at = s.find(c, start)) != std::string::npos; start = at + 1) out.push_back(s.substr(start, at - start));
  out.push_back(s.substr(start));
  return out;
}

TEST(Progress, StatusWorkedByHand) {
  // 1.2 of 3.4 GB in 2 s: 0.6 GB/s, 2.2 GB left = 3.67 s, shown rounded up.
  EXPECT_EQ(progress_status(1'200'000'000, 3'400'000'000, 2.0, ProgressUnit::kBytes, ""),
            "1.20/3.40 GB, 0.60 GB/s, ETA 0:00:04");
  EXPECT_EQ(progress_status(300, 1000, 2.0, ProgressUnit::kCount, "examples"), "300/1000 examples, 150/s, ETA 0:00:05");
  EXPECT_EQ(progress_status(300, 0, 2.0, ProgressUnit::kCount, "examples"), "300 examples, 150/s");
  EXPECT_EQ(progress_status(0, 10, 1.0, ProgressUnit::kCount, "rows"), "0/10 rows, 0/s");
  EXPECT_EQ(clock_text(3 * 3600 + 62), "3:01:02");
  EXPECT_EQ(progress_bar(0.5, 10), "[#####.....]");
  EXPECT_EQ(progress_bar(0.99, 10), "[#########.]");
  EXPECT_EQ(progress_bar(1.5, 4), "[####]");
}

TEST(Progress, PlainLinesNoMoreOftenThanAsked) {
  FakeClock clock;
  std::vector<std::string> lines;
  {
    Progress p({.label = "tokenizing", .total = 100, .unit = ProgressUnit::kCount, .noun = "examples",
                .line = [&](const std::string& l) { lines.push_back(l); }, .line_every_s = 5.0,
                .now = [&] { return clock.t; }});
    for (int i = 0; i < 100; ++i) {  // one example a second for 100 s
      clock.advance(1.0);
      p.add(1);
    }
    p.finish("tokenized", ", 7 dropped");
  }
  // Lines at 5, 10, ..., 95 s (not at 100: the closing line says it), then the closing line.
  ASSERT_EQ(lines.size(), 20u);
  EXPECT_EQ(lines[0], "tokenizing: 5/100 examples, 1/s, ETA 0:01:35");
  EXPECT_EQ(lines[18], "tokenizing: 95/100 examples, 1/s, ETA 0:00:05");
  EXPECT_EQ(lines[19], "tokenized: 100 examples in 100.0 s (1/s), 7 dropped");
}

TEST(Progress, BarRedrawnInPlaceWithinTheWidth) {
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  FakeClock clock;
  std::vector<std::string> lines, log;
  {
    Progress p({.label = "resharding", .total = 4'000'000'000, .unit = ProgressUnit::kBytes,
                .line = [&](const std::string& l) { lines.push_back(l); }, .bar_fd = fds[1],
                .log = [&](const std::string& l) { log.push_back(l); }, .bar_columns = 72, .line_every_s = 0.5,
                .redraw_every_s = 0.1, .now = [&] { return clock.t; }});
    for (int i = 0; i < 40; ++i) {  // 100 MB every 0.05 s: a redraw every other piece
      clock.advance(0.05);
      p.add(100'000'000);
    }
    p.finish("resharded");
  }
  ::close(fds[1]);
  std::string out;
  char buffer[4096];
  for (ssize_t n; (n = ::read(fds[0], buffer, sizeof buffer)) > 0;) out.append(buffer, static_cast<size_t>(n));
  ::close(fds[0]);

  ASSERT_FALSE(out.empty());
  EXPECT_EQ(out.back(), '\n');
  EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 1) << "one line, redrawn";
  std::vector<std::string> draws = split(out.substr(1, out.size() - 2), '\r');
  EXPECT_EQ(draws.size(), 22u) << "the first piece, every other piece after it, the last one again at finish";
  for (const std::string& d : draws) {
    ASSERT_GE(d.size(), 3u);
    EXPECT_EQ(d.substr(d.size() - 3), "\x1b[K") << "each redraw clears what a longer one left";
    EXPECT_LE(d.size() - 3, 71u) << "never wraps a 72-column terminal: " << d;
    EXPECT_EQ(d.rfind("resharding [", 0), 0u) << d;
  }
  EXPECT_NE(draws[0].find("[.....") , std::string::npos) << draws[0];
  EXPECT_NE(draws[0].find("   2% 0.10/4.00 GB, 2.00 GB/s, ETA 0:00:02"), std::string::npos) << draws[0];
  EXPECT_NE(draws.back().find("#####] 100% 4.00/4.00 GB, 2.00 GB/s, ETA 0:00:00"), std::string::npos) << draws.back();
  // Behind the bar, the log file gets its plain lines; the lines' own sink only the closing one.
  ASSERT_EQ(log.size(), 3u);
  EXPECT_EQ(log[0], "resharding: 1.00/4.00 GB, 2.00 GB/s, ETA 0:00:02");
  EXPECT_EQ(log[2], "resharding: 3.00/4.00 GB, 2.00 GB/s, ETA 0:00:01");
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0], "resharded: 4.00 GB in 2.0 s (2.00 GB/s)");
}

TEST(Progress, AnUnfinishedBarIsEndedByItsDestructor) {
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  {
    Progress p({.label = "loading", .total = 10, .unit = ProgressUnit::kCount, .bar_fd = fds[1], .bar_columns = 80});
    p.add(3);  // an exception would leave here
  }
  ::close(fds[1]);
  char buffer[512];
  const ssize_t n = ::read(fds[0], buffer, sizeof buffer);
  ::close(fds[0]);
  ASSERT_GT(n, 0);
  const std::string out(buffer, static_cast<size_t>(n));
  EXPECT_EQ(out.front(), '\r');
  EXPECT_EQ(out.back(), '\n');
  EXPECT_NE(out.find(" 30% 3/10 items"), std::string::npos) << out;
}

}  // namespace
}  // namespace shardtune::common
