// The packing tests hold the token file's packed rows (runtime/data/packed_rows.h) to, spelled out
// in memory: examples laid end to end into rows of exactly `context_length` tokens, with position
// ids that restart at 0 for every example (the model derives from them a mask that keeps
// examples from attending to each other). An example longer than the room left continues in
// the next row (its positions restart there too); the last row is padded with label -100.
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/data/sft_examples.h"

namespace shardtune::data {

struct PackedRows {
  int64_t context_length = 0;
  std::vector<int32_t> ids, labels, positions;  // rows back to back: rows() * context_length each
  int64_t rows() const { return context_length > 0 ? static_cast<int64_t>(ids.size()) / context_length : 0; }
};

// Pure. `pad` is the id written into padding (its label is -100).
PackedRows pack(const std::vector<Example>& examples, int64_t context_length, int32_t pad);

}  // namespace shardtune::data
