// FSDP units and their autograd function.
#include "runtime/fsdp/fsdp_unit.h"

#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/csrc/autograd/engine.h>

#include <ATen/core/grad_mode.h>
#include <ATen/record_function.h>
#include <ATen/ops/empty.h>

#include <fmt/format.h>

#include <chrono>

#include "common/error.h"

namespace shardtune::fsdp {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Outer autograd node of a unit: everything inside is the unit's own business.
struct UnitFunction : public torch::autograd::Function<UnitFunction> {
  // `handle` stands in for the unit's parameters, which autograd cannot see: it requires grad
  // when the unit has trainable parameters, so that backward reaches the unit.
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& input, const at::Tensor& handle, FsdpUnit* unit,
                            PieceFn fn) {
    ctx->saved_data["unit"] = reinterpret_cast<int64_t>(unit);
    return unit->forward_impl(input, std::move(fn));
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    auto* unit = reinterpret_cast<FsdpUnit*>(ctx->saved_data["unit"].toInt());
    return {unit->backward_impl(grad_outputs.at(0)), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

// Adds the wall time of `fn` to the communication statistics, and names it for a profiler
// ("fsdp.all_gather.wait block.3"; the name is made only while one records).
template <class Fn>
void timed(CommStats& stats, const char* what, const std::string& unit, Fn&& fn) {
  RECORD_USER_SCOPE(unit.empty() ? fmt::format("fsdp.{}", what) : fmt::format("fsdp.{} {}", what, unit));
  const auto start = std::chrono::steady_clock::now();
  fn();
  stats.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ++stats.calls;
}

}  // namespace

void FsdpContext::finish_reductions() {
  timed(comm, "reduce_scatter.finish", "", [&] {
    for (FlatParam* f : reducing)
      while (!f->advance_reduce(*replicate_group)) {
      }
  });
  reducing.clear();
  // Offloaded gradients on their way down are added into their shards, for the optimizer.
  if (options.cpu_offload)
    for (FsdpUnit* unit : order)
      for (auto& f : unit->flats()) f->land_grad();
}

std::vector<FlatParam*> FsdpUnit::used_flats() {
  std::vector<FlatParam*> out;
  for (auto& f : flats_) out.push_back(f.get());
  out.insert(out.end(), deps_.begin(), deps_.end());
  return out;
}

void FsdpUnit::start_gather_all() {
  for (FlatParam* f : used_flats())
    timed(context_->comm, "all_gather.start", name_, [&] { f->start_gather(*context_->shard_group); });
}

void FsdpUnit::gather_all() {
  start_gather_all();
  for (FlatParam* f : used_flats()) timed(context_->comm, "all_gather.wait", name_, [&] { f->finish_gather(); });
}

void FsdpUnit::reshard_all() {
  for (FlatParam* f : used_flats()) f->reshard();
}

void FsdpUnit::prefetch(size_t index) {
  if (!context_->options.overlap || index >= context_->order.size()) return;
  context_->order[index]->start_gather_all();
}

at::Tensor FsdpUnit::run(const at::Tensor& input, PieceFn fn) {
  if (!at::GradMode::is_enabled()) {
    // Evaluation: gather, run, free; nothing is kept for a backward.
    gather_all();
    prefetch(index_ + 1);
    for (FlatParam* f : used_flats()) f->leaves();
    at::Tensor out = fn(input);
    if (context_->options.reshard_after_forward) reshard_all();
    return out;
  }
  if (!handle_.defined()) {
    bool trainable = false;
    for (FlatParam* f : used_flats()) trainable = trainable || f->trainable();
    handle_ = at::empty({0}, at::TensorOptions().device(context_->options.device)).requires_grad_(trainable);
  }
  return UnitFunction::apply(input, handle_, this, std::move(fn));
}

bool FsdpUnit::recomputes() const {
  return context_->options.activation_checkpointing && checkpointed_ && backward_reads_params_;
}

at::Tensor FsdpUnit::forward_impl(const at::Tensor& input, PieceFn fn) {
  RECORD_USER_SCOPE(fmt::format("fsdp.forward {}", name_));
  gather_all();
  prefetch(index_ + 1);  // the next unit's all-gather runs while this one computes
  for (FlatParam* f : used_flats()) f->leaves();  // the slots now hold this micro-batch's leaves
  fn_ = std::move(fn);
  saved_input_ = input.detach();
  input_requires_grad_ = input.requires_grad();
  at::Tensor out;
  if (recomputes()) {
    at::NoGradGuard no_grad;
    out = fn_(saved_input_);
  } else {
    at::AutoGradMode enable(true);
    input_leaf_ = saved_input_.requires_grad_(input_requires_grad_);
    inner_output_ = fn_(input_leaf_);
    out = inner_output_.detach();
  }
  // The last unit is the first that backward needs: it stays gathered.
  const bool last = index_ + 1 == context_->order.size();
  if (context_->options.reshard_after_forward && !(last && context_->options.overlap)) reshard_all();
  return out;
}

void FsdpUnit::reduce_gradients() {
  // Reductions started by later units (earlier in backward) move one stage on: their
  // reduce-scatter has had this unit's backward to run in.
  const size_t older = context_->reducing.size();
  for (auto& f : flats_) {
    if (!f->trainable() || !f->has_unreduced_grad()) continue;
    timed(context_->comm, "reduce_scatter.start", name_, [&] { f->start_reduce(*context_->shard_group); });
    context_->reducing.push_back(f.get());
  }
  if (!context_->options.overlap) {
    context_->finish_reductions();
    return;
  }
  timed(context_->comm, "reduce_scatter.advance", name_, [&] {
    for (size_t i = 0; i < older; ++i) context_->reducing[i]->advance_reduce(*context_->replicate_group);
  });
  while (!context_->reducing.empty() && !context_->reducing.front()->reducing()) context_->reducing.pop_front();
  // What is still in flight when backward ends is finished then, before the optimizer can look.
  if (!context_->finish_queued && !context_->reducing.empty()) {
    context_->finish_queued = true;
    FsdpContext* context = context_;
    torch::autograd::Engine::get_default_engine().queue_callback([context] {
      context->finish_queued = false;
      context->finish_reductions();
    });
  }
}

at::Tensor FsdpUnit::backward_impl(const at::Tensor& grad_output) {
  RECORD_USER_SCOPE(fmt::format("fsdp.backward {}", name_));
  if (backward_reads_params_) gather_all();
  // Backward runs the units in reverse: the previous one's gather runs while this one computes.
  if (index_ > 0 && context_->order[index_ - 1]->backward_reads_params()) prefetch(index_ - 1);
  if (recomputes()) {
    at::AutoGradMode enable(true);
    input_leaf_ = saved_input_.detach().requires_grad_(input_requires_grad_);
    inner_output_ = fn_(input_leaf_);
  }
  // The gradients this piece produces: its trainable leaves (own and tied) and its input.
  std::vector<std::pair<FlatParam*, size_t>> targets;
  std::vector<at::Tensor> inputs;
  for (FlatParam* f : used_flats()) {
    if (!f->trainable()) continue;
    const std::vector<at::Tensor>& leaves = f->leaves();
    for (size_t i = 0; i < leaves.size(); ++i) {
      targets.emplace_back(f, i);
      inputs.push_back(leaves[i]);
    }
  }
  const bool want_input_grad = input_leaf_.defined() && input_leaf_.requires_grad();
  if (want_input_grad) inputs.push_back(input_leaf_);
  at::Tensor grad_input;
  if (!inputs.empty()) {
    const variable_list grads = torch::autograd::grad({inner_output_}, inputs, {grad_output}, /*retain_graph=*/false,
                                                      /*create_graph=*/false, /*allow_unused=*/true);
    // One rank alone, without replicas: no reduction, each gradient goes straight into its shard.
    const bool unreduced = context_->shard_group->size() > 1 || context_->replicate_group->size() > 1;
    for (size_t i = 0; i < targets.size(); ++i)
      if (grads[i].defined()) targets[i].first->accumulate_grad(targets[i].second, grads[i], unreduced);
    if (want_input_grad) grad_input = grads.back();
  }
  inner_output_ = at::Tensor();
  input_leaf_ = at::Tensor();
  saved_input_ = at::Tensor();
  fn_ = nullptr;  // it may hold per-batch tensors (RoPE tables, masks)
  if (context_->sync_grads) reduce_gradients();
  if (context_->options.reshard_after_backward) reshard_all();
  return grad_input;
}

}  // namespace shardtune::fsdp
