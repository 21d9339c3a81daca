// Wrapping Llama's pieces in FSDP units.
#include "runtime/fsdp/fsdp_llama.h"

#include <ATen/ops/empty.h>
#include <ATen/ops/full.h>
#include <ATen/ops/linalg_vector_norm.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>

#include "common/error.h"
#include "runtime/fsdp/llama_units.h"
#include "runtime/fsdp/nf4_storage.h"

namespace shardtune::fsdp {

FsdpLlama::FsdpLlama(model::LlamaForCausalLM& model, dist::ProcessGroups& groups, const FsdpOptions& options,
                     const std::set<std::string>& frozen)
    : model_(model), groups_(groups) {
  context_.shard_group = groups.shard.get();
  context_.replicate_group = groups.replicate.get();
  context_.options = options;
  ST_CHECK(groups.shard->size() == options.shard_size, common::ErrorKind::kInternal,
           "FSDP options shard over {} ranks but the shard group has {}", options.shard_size, groups.shard->size());
  const int shard_rank = groups.shard->rank();

  const std::vector<std::vector<model::NamedParam>> units = llama_units(model);
  auto make_unit = [&](const std::string& name, const std::vector<model::NamedParam>& params) {
    auto unit = std::make_unique<FsdpUnit>(name, &context_, context_.order.size());
    context_.order.push_back(unit.get());
    // Trainable parameters, frozen ones, and (QLoRA) frozen ones stored in NF4: a flat of each.
    enum Kind { kTrainable, kFrozen, kNf4 };
    auto kind_of = [&](const std::string& name) {
      if (frozen.count(name) == 0) return kTrainable;
      return options.nf4_base && quant::is_nf4_weight(name) ? kNf4 : kFrozen;
    };
    for (Kind kind : {kTrainable, kFrozen, kNf4}) {
      std::vector<FlatLayout::Entry> entries;
      std::vector<at::Tensor*> slots;
      for (const model::NamedParam& p : params) {
        if (kind_of(p.name) != kind) continue;
        entries.push_back({p.name, std::vector<int64_t>(p.tensor->sizes().begin(), p.tensor->sizes().end())});
        slots.push_back(p.tensor);
      }
      if (entries.empty()) continue;
      const std::optional<quant::Nf4Format> nf4 = kind == kNf4 ? options.nf4_base : std::nullopt;
      FlatLayout layout(entries, options.shard_size,
                        nf4 ? nf4->record_elements() : kind == kTrainable ? options.trainable_align : 1);
      padding_ += layout.padding();
      unit->flats().push_back(
          std::make_unique<FlatParam>(std::move(layout), slots, kind == kTrainable, options, shard_rank, nf4));
    }
    return unit;
  };
  embed_ = make_unit("embed", units.front());
  embed_->set_backward_reads_params(false);  // the embedding's gradient comes from the ids alone
  for (size_t i = 1; i + 1 < units.size(); ++i) blocks_.push_back(make_unit(fmt::format("block{}", i - 1), units[i]));
  head_ = make_unit("head", units.back());
  head_->set_checkpointed(false);  // its backward follows its forward at once
  const auto blocks = static_cast<int64_t>(blocks_.size());
  for (int64_t i = std::max<int64_t>(0, blocks - options.uncheckpointed_blocks); i < blocks; ++i)
    blocks_[static_cast<size_t>(i)]->set_checkpointed(false);
  if (model.config().tie_word_embeddings)
    for (auto& f : embed_->flats()) head_->add_dependency(f.get());
  if (padding_ > 0)
    spdlog::info("FSDP: padded flat parameters with {} zero elements so every unit divides among {} ranks", padding_,
                 options.shard_size);
}

at::Tensor FsdpLlama::forward(const at::Tensor& input_ids, const at::Tensor& position_ids,
                              const model::DropoutSeed& dropout) {
  const at::Tensor h = hidden(input_ids, position_ids, dropout);
  return head_->run(h, [this, dropout](const at::Tensor& x) { return model_.head(x, dropout); });
}

at::Tensor FsdpLlama::forward_loss(const at::Tensor& input_ids, const at::Tensor& position_ids,
                                   const at::Tensor& labels, const model::DropoutSeed& dropout) {
  const at::Tensor h = hidden(input_ids, position_ids, dropout);
  const at::Tensor on_device = labels.to(context_.options.device, labels.scalar_type(), /*non_blocking=*/true);
  return head_->run(h, [this, dropout, on_device](const at::Tensor& x) { return model_.head_loss(x, on_device, dropout); });
}

at::Tensor FsdpLlama::forward_token_losses(const at::Tensor& input_ids, const at::Tensor& position_ids,
                                           const at::Tensor& labels, const model::DropoutSeed& dropout) {
  const at::Tensor h = hidden(input_ids, position_ids, dropout);
  const at::Tensor on_device = labels.to(context_.options.device, labels.scalar_type(), /*non_blocking=*/true);
  return head_->run(h, [this, dropout, on_device](const at::Tensor& x) {
    return model_.head_token_losses(x, on_device, dropout);
  });
}

at::Tensor FsdpLlama::hidden(const at::Tensor& input_ids, const at::Tensor& position_ids,
                             const model::DropoutSeed& dropout) {
  for (FlatParam* f : flat_params()) f->reset_leaves();
  const model::AttentionMask mask =
      position_ids.defined() ? model::packed_document_mask(position_ids) : model::AttentionMask{};
  const at::Device& device = context_.options.device;
  // Non-blocking: a copy from pageable host memory is staged at once, and this way the host does
  // not wait for the work already queued on the device (the previous backward) first.
  const at::Tensor ids = input_ids.to(device, input_ids.scalar_type(), /*non_blocking=*/true);
  const at::Tensor positions = position_ids.defined()
                                   ? position_ids.to(device, position_ids.scalar_type(), /*non_blocking=*/true)
                                   : model::default_position_ids(ids);
  at::Tensor h = embed_->run(ids, [this](const at::Tensor& x) { return model_.embed(x); });
  const model::RopeTables rope = model_.rope(positions, context_.options.precision.compute);
  for (int64_t i = 0; i < model_.num_layers(); ++i) {
    model::DecoderLayer* layer = &model_.layer(i);
    h = blocks_[static_cast<size_t>(i)]->run(h, [layer, rope, mask, dropout](const at::Tensor& x) {
      return layer->forward(x, rope, mask, dropout);
    });
  }
  return h;
}

void FsdpLlama::finish_loading() {
  for (FlatParam* f : flat_params()) f->finish_quantization(*context_.shard_group);
}

std::vector<FlatParam*> FsdpLlama::flat_params() {
  std::vector<FlatParam*> out;
  auto add = [&](FsdpUnit& u) {
    for (auto& f : u.flats()) out.push_back(f.get());
  };
  add(*embed_);
  for (auto& b : blocks_) add(*b);
  add(*head_);
  return out;
}

double FsdpLlama::grad_norm() {
  return std::sqrt(grad_norm_squared().item<double>());  // the host's one wait here
}

at::Tensor FsdpLlama::grad_norm_squared() {
  // Replicas hold identical gradient shards after the all-reduce: the norm is over the shard group.
  at::Tensor sum_sq = at::full({1}, 0.0, at::TensorOptions().dtype(at::kDouble).device(device()));
  // Each piece's norm in one fp32 reduction (no temporary: the shard is read once), the squares of
  // the pieces' norms summed in fp64: a piece of 2^24 elements rounds its sum within ~24 u.
  for (FlatParam* f : flat_params()) {
    if (!f->trainable()) continue;
    const at::Tensor& g = f->grad_shard();
    constexpr int64_t kPiece = int64_t{1} << 24;
    for (int64_t start = 0; start < g.numel(); start += kPiece) {
      const int64_t len = std::min(kPiece, g.numel() - start);
      const at::Tensor norm = at::linalg_vector_norm(g.narrow(0, start, len), 2, c10::nullopt, false, at::kFloat);
      sum_sq += norm.to(at::kDouble).square();
    }
  }
  groups_.shard->all_reduce(sum_sq, dist::ReduceOp::kSum);
  return sum_sq;
}

double FsdpLlama::clip_coefficient(double norm, double max_norm) {
  const double coef = max_norm / (norm + 1e-6);
  return coef < 1.0 ? coef : 1.0;
}

void FsdpLlama::finish_grad_sync() {
  context_.finish_reductions();
  // What no gradient reached since zero_grad is zeroed now, before the optimizer reads the shards
  // through the tensors it holds.
  for (FlatParam* f : flat_params()) f->settle_grad();
}

void FsdpLlama::zero_grad() {
  for (FlatParam* f : flat_params())
    f->zero_grad();
}

std::map<std::string, at::Tensor> FsdpLlama::gather_full_parameters() {
  std::map<std::string, at::Tensor> out;
  for (FlatParam* f : flat_params()) {
    const FlatLayout& layout = f->layout();
    at::Tensor full = at::empty({f->shard().numel() * groups_.shard->size()}, f->shard().options());
    groups_.shard->all_gather(f->shard(), full);
    if (f->nf4()) {  // every rank's records, dequantised as a gather does
      at::Tensor values = at::empty({layout.padded_numel()}, full.options().dtype(context_.options.precision.frozen));
      dequantize_into(full, *f->nf4(), values);
      full = values;
    }
    for (const ParamSpan& p : layout.params())
      out[p.name] = full.narrow(0, p.offset, p.numel).view(p.shape).to(at::kCPU, /*non_blocking=*/false, /*copy=*/true);
  }
  return out;
}

FlatParam::WireBytes FsdpLlama::wire_bytes() {
  FlatParam::WireBytes total;
  for (FlatParam* f : flat_params()) {
    total.gathered += f->wire_bytes().gathered;
    total.reduced += f->wire_bytes().reduced;
  }
  return total;
}

int64_t FsdpLlama::persistent_bytes() {
  int64_t bytes = 0;
  for (FlatParam* f : flat_params()) bytes += f->persistent_bytes();
  return bytes;
}

}  // namespace shardtune::fsdp
