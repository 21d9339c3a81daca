// Packed rows as views of a token file: row r is tokens [r*T, (r+1)*T) of all examples laid
// end to end, padded after the last; a token's position counts from the start of its example or
// of its row, whichever is later. Without a copy: the same rows as packing the examples in memory
// (the tests' reference, tests/unit/packing_reference.h).
#pragma once

#include <memory>

#include "runtime/data/token_file.h"

namespace shardtune::data {

class PackedRowView {
 public:
  PackedRowView(std::shared_ptr<const TokenFile> tokens, int64_t context_length, int32_t pad);
  int64_t rows() const { return rows_; }
  int64_t context_length() const { return context_length_; }
  // Fills the row's ids, labels and positions (context_length each).
  void row(int64_t r, int32_t* ids, int32_t* labels, int32_t* positions) const;

 private:
  std::shared_ptr<const TokenFile> tokens_;
  int64_t context_length_;
  int32_t pad_;
  int64_t rows_;
};

}  // namespace shardtune::data
