// common::LruCache against a plain reference (a list, most recent first) over random gets: the
// same values held, the least recently used evicted, each made and evicted once per stay; and the
// open-file limit's messages.
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <algorithm>
#include <cerrno>
#include <list>
#include <map>
#include <random>

#include "common/lru_cache.h"
#include "common/open_files.h"

namespace shardtune::common {
namespace {

TEST(LruCache, MatchesAReferenceOverRandomGets) {
  for (uint32_t seed = 1; seed <= 20; ++seed) {
    std::mt19937 rng(seed);
    const size_t capacity = 1 + rng() % 5;
    std::map<int, int> made, evicted;
    LruCache<int, int> cache(capacity, [&](int& v) { ++evicted[v]; });
    std::list<int> reference;  // most recently used first
    for (int i = 0; i < 500; ++i) {
      const int key = static_cast<int>(rng() % 9);
      const bool held = std::find(reference.begin(), reference.end(), key) != reference.end();
      const int got = cache.get(key, [&] {
        ++made[key];
        return key;
      });
      ASSERT_EQ(got, key);
      if (held) {
        reference.remove(key);
      } else if (reference.size() == capacity) {
        reference.pop_back();
      }
      reference.push_front(key);
      ASSERT_EQ(cache.size(), reference.size()) << "seed " << seed;
      for (const auto& [k, n] : made)  // every value made is held or was evicted, once per stay
        ASSERT_EQ(n - evicted[k], std::count(reference.begin(), reference.end(), k)) << "seed " << seed << " key " << k;
    }
    cache.clear();
    EXPECT_EQ(cache.size(), 0u);
    for (const auto& [k, n] : made) EXPECT_EQ(evicted[k], n);
  }
}

TEST(LruCache, AValueThatFailsToBeMadeIsNotHeld) {
  LruCache<int, int> cache(2);
  EXPECT_THROW(cache.get(1, []() -> int { throw std::runtime_error("cannot open"); }), std::runtime_error);
  EXPECT_EQ(cache.size(), 0u);
  EXPECT_EQ(cache.get(1, [] { return 7; }), 7);
}

TEST(OpenFiles, TheLimitIsNamedWhenItIsTheReason) {
  EXPECT_NE(open_failure("/x/rank-00001.h5", EMFILE).find("raise `ulimit -n`"), std::string::npos);
  EXPECT_NE(open_failure("/x/rank-00001.h5", EMFILE).find("/x/rank-00001.h5"), std::string::npos);
  EXPECT_EQ(open_failure("/x/a", ENOENT).find("ulimit"), std::string::npos);
}

TEST(OpenFiles, TheSoftLimitIsRaisedToTheHardOne) {
  rlimit lim{};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &lim), 0);
  const rlimit before = lim;
  lim.rlim_cur = std::min<rlim_t>(lim.rlim_max, 100);
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &lim), 0);
  EXPECT_EQ(open_file_limit(), static_cast<int64_t>(lim.rlim_cur));
  EXPECT_EQ(open_file_share(), 4u);  // (100 - 64) / 8 is below the floor
  EXPECT_EQ(raise_open_file_limit(), static_cast<int64_t>(lim.rlim_max == RLIM_INFINITY ? int64_t(1) << 20 : lim.rlim_max));
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &before), 0);
}

}  // namespace
}  // namespace shardtune::common
