// AdamW's step on the host: the fused fp32 pass against the operation-at-a-time path (LibTorch's
// single-tensor AdamW), against 8-bit AdamW's block loop (runtime/fsdp/adam8bit.h) and against
// Adafactor (runtime/fsdp/adafactor.h, its ATen operations, no first moment), on tensors of the
// same sizes in the same run, alternating. The tensors:
// the flat parameters of bench/cpu_model.sh's 0.12B Llama at one rank (embedding, 12 blocks,
// head), SCALE times each. Printed: each one's median seconds per step, its bandwidth over the
// bytes the fused pass must move (28 B an element: parameter, both moments read and written, the
// gradient read), the ratios, and each one's optimizer state.
// Run: bench/adamw.sh, or build/bin/adamw_bench [SCALE] [STEPS].
#include <ATen/Parallel.h>
#include <ATen/ops/randn.h>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <vector>

#include "runtime/fsdp/adafactor.h"
#include "runtime/fsdp/adamw.h"

using namespace shardtune;

int main(int argc, char** argv) {
  const double scale = argc > 1 ? std::atof(argv[1]) : 1.0;
  const int steps = argc > 2 ? std::atoi(argv[2]) : 7;
  const int64_t embedding = 32000 * 768, block = 2 * 768 * 768 + 2 * 256 * 768 + 3 * 768 * 2048 + 2 * 768;
  std::vector<int64_t> sizes = {embedding};
  for (int b = 0; b < 12; ++b) sizes.push_back(block);
  sizes.push_back(embedding + 768);
  int64_t n = 0;
  for (int64_t& size : sizes) n += size = static_cast<int64_t>(static_cast<double>(size) * scale);
  fsdp::AdamW fused({0.9, 0.95, 1e-8, 0.1, true}), ops({0.9, 0.95, 1e-8, 0.1, false}),
      eight({0.9, 0.95, 1e-8, 0.1, true, /*blockwise_8bit=*/true});
  std::vector<at::Tensor> keep;
  for (int64_t size : sizes)
    for (fsdp::AdamW* opt : {&fused, &ops, &eight}) {
      at::Tensor p = at::randn({size}), g = at::randn({size});
      opt->add(p, g);
      keep.insert(keep.end(), {p, g});
    }
  // Adafactor sees the tensors' shapes: the same flat parameters, each a flat of its matrices and norms.
  const std::vector<fsdp::FlatLayout::Entry> embed{{"embed", {32000, 768}}};
  const std::vector<fsdp::FlatLayout::Entry> layer{
      {"q", {768, 768}},  {"k", {256, 768}},    {"v", {256, 768}},    {"o", {768, 768}},     {"gate", {2048, 768}},
      {"up", {2048, 768}}, {"down", {768, 2048}}, {"norm1", {768}}, {"norm2", {768}}};
  const std::vector<fsdp::FlatLayout::Entry> head{{"norm", {768}}, {"lm_head", {32000, 768}}};
  std::vector<fsdp::FlatLayout> layouts{fsdp::FlatLayout(embed, 1)};
  for (int b = 0; b < 12; ++b) layouts.emplace_back(layer, 1);
  layouts.emplace_back(head, 1);
  fsdp::Adafactor factored({}, nullptr);
  int64_t factored_n = 0;
  for (const fsdp::FlatLayout& layout : layouts) {
    factored_n += layout.numel();
    at::Tensor p = at::randn({layout.shard_numel()}), g = at::randn({layout.shard_numel()});
    factored.add(p, g, layout, 0);
    keep.insert(keep.end(), {p, g});
  }
  std::vector<double> t_fused, t_ops, t_eight, t_factored;
  const auto time = [](fsdp::Optimizer& opt) {
    const auto start = std::chrono::steady_clock::now();
    opt.step(1e-4);
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  time(fused);  // first touch of the moments
  time(ops);
  time(eight);
  time(factored);
  for (int s = 0; s < steps; ++s) {
    t_fused.push_back(time(fused));
    t_ops.push_back(time(ops));
    t_eight.push_back(time(eight));
    t_factored.push_back(time(factored));
  }
  const auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  const double f = median(t_fused), o = median(t_ops), e = median(t_eight), a = median(t_factored);
  const double bytes = 28.0 * static_cast<double>(n);
  fmt::print("AdamW step, {:.1f}M fp32 parameters in {} tensors, {} threads, median of {} steps\n", n / 1e6, sizes.size(),
             at::get_num_threads(), steps);
  fmt::print("  operation at a time  {:8.3f} s  {:6.1f} GB/s (of the fused pass's bytes)\n", o, bytes / o / 1e9);
  fmt::print("  fused                {:8.3f} s  {:6.1f} GB/s\n", f, bytes / f / 1e9);
  fmt::print("  8-bit block-wise     {:8.3f} s  {:6.1f} GB/s\n", e, bytes / e / 1e9);
  fmt::print("  Adafactor            {:8.3f} s  (the shapes at scale 1: {:.1f}M parameters)\n", a,
             static_cast<double>(factored_n) / 1e6);
  fmt::print("  fused / operation at a time: {:.2f}x faster\n", o / f);
  fmt::print("  8-bit / fused: {:.2f}x the time, {:.3f}x the state ({:.1f} MiB against {:.1f} MiB)\n", e / f,
             static_cast<double>(eight.state_bytes()) / static_cast<double>(fused.state_bytes()),
             eight.state_bytes() / 1048576.0, fused.state_bytes() / 1048576.0);
  fmt::print("  Adafactor / fused: {:.2f}x the time, {:.4f}x the state ({:.2f} MiB)\n", a / f,
             static_cast<double>(factored.state_bytes()) / static_cast<double>(fused.state_bytes()),
             factored.state_bytes() / 1048576.0);
  return 0;
}
