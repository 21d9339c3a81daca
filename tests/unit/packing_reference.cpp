#include "tests/unit/packing_reference.h"

#include "common/error.h"

namespace shardtune::data {

PackedRows pack(const std::vector<Example>& examples, int64_t context_length, int32_t pad) {
  ST_CHECK(context_length > 0, common::ErrorKind::kConfig, "context_length must be positive, not {}", context_length);
  PackedRows out;
  out.context_length = context_length;
  const auto t = static_cast<size_t>(context_length);
  for (const Example& e : examples) {
    size_t done = 0;
    while (done < e.ids.size()) {
      const size_t room = t - out.ids.size() % t;
      const size_t n = std::min(room, e.ids.size() - done);
      out.ids.insert(out.ids.end(), e.ids.begin() + static_cast<std::ptrdiff_t>(done),
                     e.ids.begin() + static_cast<std::ptrdiff_t>(done + n));
      out.labels.insert(out.labels.end(), e.labels.begin() + static_cast<std::ptrdiff_t>(done),
                        e.labels.begin() + static_cast<std::ptrdiff_t>(done + n));
      for (size_t p = 0; p < n; ++p) out.positions.push_back(static_cast<int32_t>(p));
      done += n;
    }
  }
  // Padding to the end of the last row: its own "document", never learned.
  const size_t tail = out.ids.size() % t == 0 ? 0 : t - out.ids.size() % t;
  for (size_t p = 0; p < tail; ++p) {
    out.ids.push_back(pad);
    out.labels.push_back(kIgnoreLabel);
    out.positions.push_back(static_cast<int32_t>(p));
  }
  return out;
}

}  // namespace shardtune::data
