#include "runtime/data/packed_rows.h"

#include <algorithm>

#include "common/error.h"

namespace shardtune::data {

PackedRowView::PackedRowView(std::shared_ptr<const TokenFile> tokens, int64_t context_length, int32_t pad)
    : tokens_(std::move(tokens)), context_length_(context_length), pad_(pad) {
  ST_CHECK(context_length > 0, common::ErrorKind::kConfig, "context_length must be positive, not {}", context_length);
  rows_ = (tokens_->num_tokens() + context_length - 1) / context_length;
}

void PackedRowView::row(int64_t r, int32_t* ids, int32_t* labels, int32_t* positions) const {
  ST_CHECK(r >= 0 && r < rows_, common::ErrorKind::kInternal, "row {} of {}", r, rows_);
  const std::span<const int64_t> offsets = tokens_->offsets();
  const int64_t begin = r * context_length_;
  const int64_t end = std::min(begin + context_length_, tokens_->num_tokens());
  // The example holding the row's first token.
  size_t example = static_cast<size_t>(std::upper_bound(offsets.begin(), offsets.end(), begin) - offsets.begin()) - 1;
  for (int64_t g = begin; g < end; ++g) {
    while (offsets[example + 1] <= g) ++example;
    const int64_t i = g - begin;
    ids[i] = tokens_->ids()[static_cast<size_t>(g)];
    labels[i] = tokens_->labels()[static_cast<size_t>(g)];
    positions[i] = static_cast<int32_t>(g - std::max(begin, offsets[example]));
  }
  for (int64_t i = end - begin; i < context_length_; ++i) {
    ids[i] = pad_;
    labels[i] = kIgnoreLabel;
    positions[i] = static_cast<int32_t>(i - (end - begin));
  }
}

}  // namespace shardtune::data
