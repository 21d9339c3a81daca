// Checksums taken during the optimizer's update.
#include "checkpoint/update_crcs.h"

#include <algorithm>
#include <chrono>

#include "checkpoint/saved_state.h"
#include "runtime/fsdp/adamw.h"

namespace shardtune::checkpoint {

fsdp::Optimizer::PieceObserver UpdateCrcs::watch(fsdp::FsdpLlama& model, fsdp::Optimizer& optimizer) {
  by_param_.clear();
  seconds_ = 0;
  size_t trainable = 0;
  for (fsdp::FlatParam* f : model.flat_params()) {
    if (!f->trainable()) continue;
    std::vector<Tensor> tensors;
    // An 8-bit AdamW's saved moments are decoded copies, made at the save, and Adafactor's
    // statistics are not updated a piece at a time: the shard alone here.
    const auto* adamw = dynamic_cast<const fsdp::AdamW*>(&optimizer);
    fsdp::Optimizer* watched = adamw != nullptr && !adamw->config().blockwise_8bit ? &optimizer : nullptr;
    for (FlatState& s : state_of(f, watched, trainable)) {
      const at::Tensor& t = s.tensor;
      if (!t.device().is_cpu() || t.scalar_type() != at::kFloat || !t.is_contiguous()) continue;  // staged
      Tensor entry{s.kind, t, {}, {}, {}, 0, 0, -1};
      for (const fsdp::ShardPiece& piece : s.layout->pieces_in_shard(s.shard_of(*f))) {
        entry.slices.emplace_back(piece.shard_offset, piece.shard_offset + piece.length);
        entry.sums.emplace_back();
      }
      if (t.numel() == 0) entry.feed(0, 0);
      tensors.push_back(std::move(entry));
    }
    by_param_.push_back(std::move(tensors));
  }
  return [this](size_t param, int64_t start, int64_t count) {
    if (param >= by_param_.size()) return;
    const auto begun = std::chrono::steady_clock::now();
    for (Tensor& t : by_param_[param]) t.feed(start, count);
    seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - begun).count();
  };
}

// The slices lie in the tensor in order and apart (pieces_in_shard walks the flat layout's params
// by offset), and the pieces come in order: each piece sums its overlap with the slices from
// `next` on.
void UpdateCrcs::Tensor::feed(int64_t start, int64_t count) {
  const float* data = count > 0 ? tensor.data_ptr<float>() : nullptr;
  const int64_t end = start + count;
  for (size_t s = next; s < slices.size() && slices[s].first < end; ++s) {
    const int64_t from = std::max(start, slices[s].first), to = std::min(end, slices[s].second);
    if (from < to) sums[s].add(data + from, to - from);
    if (slices[s].second <= end) next = s + 1;
  }
  fed += count;
  if (fed != tensor.numel()) return;
  crcs.clear();
  for (BlockCrc& sum : sums) crcs.push_back(sum.finish());
  version = static_cast<int64_t>(tensor._version());
}

size_t UpdateCrcs::fill(std::vector<FullUnit>& units) {
  used_ = 0;
  for (FullUnit& u : units) {
    if (!u.crcs.empty() || !u.shard.defined() || u.shard.numel() == 0) continue;
    for (const std::vector<Tensor>& tensors : by_param_)
      for (const Tensor& t : tensors)
        if (t.version >= 0 && t.kind == u.kind && t.tensor.numel() == u.shard.numel() &&
            t.tensor.data_ptr() == u.shard.data_ptr() && static_cast<int64_t>(u.shard._version()) == t.version) {
          u.crcs = t.crcs;
          ++used_;
        }
  }
  return used_;
}

size_t UpdateCrcs::complete() const {
  size_t n = 0;
  for (const std::vector<Tensor>& tensors : by_param_)
    for (const Tensor& t : tensors) n += t.version >= 0 ? 1 : 0;
  return n;
}

}  // namespace shardtune::checkpoint
