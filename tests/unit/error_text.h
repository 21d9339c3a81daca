// The message of the common::Error that `f` throws, or "" when it throws none: for tests that
// check what an error says (the file, key or tensor it names).
#pragma once

#include <functional>
#include <string>

#include "common/error.h"

namespace shardtune::testing_support {

inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const common::Error& e) {
    return e.what();
  }
  return "";
}

// Whether `text` contains `part`.
inline bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace shardtune::testing_support
