// Reading what a numpy reference (tests/reference/*.py) wrote: raw little-endian arrays and the
// cases.json describing them, in a directory an environment variable names (set by ctest), and
// comparing results with them bit for bit.
#pragma once

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

namespace shardtune::testing_support {

// The directory in `variable`, or "" when it is not set (run outside ctest: the tests skip).
inline std::string reference_dir(const char* variable) {
  const char* dir = std::getenv(variable);
  return dir == nullptr ? "" : dir;
}

template <class T>
std::vector<T> read_raw(const std::string& dir, const std::string& name) {
  std::ifstream in(dir + "/" + name, std::ios::binary);
  EXPECT_TRUE(in.good()) << name;
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<T> out(bytes.size() / sizeof(T));
  std::memcpy(out.data(), bytes.data(), out.size() * sizeof(T));
  return out;
}

inline nlohmann::json read_cases(const std::string& dir) {
  std::ifstream in(dir + "/cases.json");
  return nlohmann::json::parse(in);
}

// Index of the first of n elements whose bits differ, or -1 (-2: b does not have n elements).
template <class T>
int64_t first_difference(const T* a, const std::vector<T>& b, size_t n) {
  if (n != b.size()) return -2;
  for (size_t i = 0; i < n; ++i)
    if (std::memcmp(&a[i], &b[i], sizeof(T)) != 0) return static_cast<int64_t>(i);
  return -1;
}

template <class T>
int64_t first_difference(const std::vector<T>& a, const std::vector<T>& b) {
  return first_difference(a.data(), b, a.size());
}

}  // namespace shardtune::testing_support
