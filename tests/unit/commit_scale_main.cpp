// A synthetic Llama 3 70B checkpoint of 512 ranks (AdamW moments saved: 3 kinds, ~128,000 slices,
// a ~29 MB manifest) committed and pruned through the real commit protocol, for
// tests/cli/commit_scale_test.sh, which counts the file-system calls with strace. Rank files are
// empty: the protocol looks at names, never at contents.
//   commit_scale ROOT commit STEP          PendingCheckpoint(ROOT, STEP) + commit(keep_last = 0)
//   commit_scale ROOT prune KEEP STEP      prune_checkpoints(ROOT, KEEP, step-STEP)
// Each prints "<what>: <n> slices, <m> manifests parsed, <s> s".
#include <fmt/format.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <string>
#include <utility>
#include <vector>

#include "checkpoint/block_crc.h"
#include "checkpoint/commit.h"
#include "checkpoint/manifest.h"

namespace {

using shardtune::checkpoint::Manifest;
using shardtune::checkpoint::ManifestSlice;

constexpr int kRanks = 512;

// Llama 3 70B's FSDP units, each as its tensors (name, shape).
std::vector<std::vector<std::pair<std::string, std::vector<int64_t>>>> units() {
  const int64_t d = 8192, kv = 1024, f = 28672, v = 128256;
  std::vector<std::vector<std::pair<std::string, std::vector<int64_t>>>> out;
  out.push_back({{"model.embed_tokens.weight", {v, d}}});
  for (int l = 0; l < 80; ++l) {
    const std::string p = fmt::format("model.layers.{}.", l);
    out.push_back({{p + "input_layernorm.weight", {d}},
                   {p + "self_attn.q_proj.weight", {d, d}},
                   {p + "self_attn.k_proj.weight", {kv, d}},
                   {p + "self_attn.v_proj.weight", {kv, d}},
                   {p + "self_attn.o_proj.weight", {d, d}},
                   {p + "post_attention_layernorm.weight", {d}},
                   {p + "mlp.gate_proj.weight", {f, d}},
                   {p + "mlp.up_proj.weight", {f, d}},
                   {p + "mlp.down_proj.weight", {d, f}}});
  }
  out.push_back({{"model.norm.weight", {d}}, {"lm_head.weight", {v, d}}});
  return out;
}

// As FSDP lays a unit out: its tensors back to back, padded to a multiple of the ranks, each rank
// holding one contiguous shard (one dataset per unit in its file); a slice per (tensor, rank).
Manifest synthetic_manifest(int64_t step) {
  Manifest m;
  m.step = step;
  m.optimizer_step = step;
  m.has_optimizer = true;
  m.world_size = kRanks;
  m.shard_group_size = kRanks;
  const auto all = units();
  for (const auto& unit : all)
    for (const auto& [name, shape] : unit) m.tensors[name] = {shape, "F32"};
  for (const char* kind : {"param", "exp_avg", "exp_avg_sq"}) {
    for (size_t u = 0; u < all.size(); ++u) {
      int64_t total = 0;
      for (const auto& [name, shape] : all[u]) total += m.tensors[name].numel();
      const int64_t shard = (total + kRanks - 1) / kRanks;
      int64_t at = 0;
      for (const auto& [name, shape] : all[u]) {
        const int64_t n = m.tensors[name].numel();
        for (int64_t lo = at; lo < at + n;) {
          const int64_t rank = lo / shard, hi = std::min(at + n, (rank + 1) * shard);
          ManifestSlice s{kind, name, fmt::format("rank-{:05d}.h5", rank), fmt::format("unit-{}", u), lo - at, hi - lo};
          s.dataset_offset = lo - rank * shard;
          s.crcs.assign(static_cast<size_t>((hi - lo + s.block - 1) / s.block), static_cast<uint32_t>(lo));
          m.slices.push_back(std::move(s));
          lo = hi;
        }
        at += n;
      }
    }
  }
  return m;
}

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

}  // namespace

int main(int argc, char** argv) {
  namespace ckpt = shardtune::checkpoint;
  const std::string usage = "usage: commit_scale ROOT commit STEP | commit_scale ROOT prune KEEP STEP";
  if (argc < 4) {
    std::cerr << usage << "\n";
    return 2;
  }
  const std::string root = argv[1], what = argv[2];
  try {
    if (what == "commit" && argc == 4) {
      const int64_t step = std::atoll(argv[3]);
      const Manifest m = synthetic_manifest(step);
      ckpt::PendingCheckpoint pending(root, step);
      for (int r = 0; r < kRanks; ++r) std::ofstream(fmt::format("{}/rank-{:05d}.h5", pending.dir(), r));
      const int64_t parsed = ckpt::manifests_parsed();
      const auto start = std::chrono::steady_clock::now();
      const auto done = pending.commit(m, 0);
      std::cout << fmt::format("commit: {} slices, {} manifests parsed, {:.2f} s\n", m.slices.size(),
                               ckpt::manifests_parsed() - parsed, seconds_since(start));
      for (const std::string& w : done.warnings) std::cout << "warning: " << w << "\n";
      return 0;
    }
    if (what == "prune" && argc == 5) {
      const int64_t parsed = ckpt::manifests_parsed();
      const auto start = std::chrono::steady_clock::now();
      const auto problems = ckpt::prune_checkpoints(root, std::atoll(argv[3]), ckpt::step_dir_name(std::atoll(argv[4])), 0);
      std::cout << fmt::format("prune: {} manifests parsed, {:.2f} s\n", ckpt::manifests_parsed() - parsed,
                               seconds_since(start));
      for (const std::string& p : problems) std::cout << "problem: " << p << "\n";
      return problems.empty() ? 0 : 1;
    }
  } catch (const std::exception& e) {
    std::cerr << "commit_scale: " << e.what() << "\n";
    return 1;
  }
  std::cerr << usage << "\n";
  return 2;
}
