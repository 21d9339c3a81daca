// The cases of tests/reference/adafactor_reference.py, run by shardtune's Adafactor: each flat
// parameter of a case laid out over the ranks of `group` (none: one rank holding it whole), this
// rank's shard stepped through the case's gradients, then its pieces, its statistics and its first
// moments held to the reference's float64 results. Shared by the one-process test
// (tests/unit/adafactor_test.cpp) and the sharded one (tests/mpi/adafactor_fsdp_test.cpp).
#pragma once

#include <ATen/ops/zeros.h>
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "runtime/dist/communicator.h"
#include "runtime/fsdp/adafactor.h"
#include "runtime/fsdp/shard_layout.h"
#include "tests/unit/reference_files.h"

namespace shardtune::testing_support {

// The largest error of `got` against the reference's elements from `offset`: relative to each
// element (`elementwise`: the statistics, means of squares, which nothing cancels), or relative to
// the reference tensor's largest magnitude (parameters and first moments, sums of signed updates,
// whose small elements are differences of larger ones).
inline double relative_error(const float* got, const std::vector<float>& want, int64_t offset, int64_t n,
                             bool elementwise) {
  double largest = 0;
  for (float w : want) largest = std::max(largest, static_cast<double>(std::fabs(w)));
  double worst = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double w = want[static_cast<size_t>(offset + i)];
    const double scale = elementwise ? std::fabs(w) : largest;
    const double e = scale == 0 ? std::fabs(got[i] - w) : std::fabs(got[i] - w) / scale;
    worst = std::max(worst, std::isfinite(got[i]) ? e : INFINITY);
  }
  return worst;
}

inline fsdp::AdafactorConfig adafactor_config(const nlohmann::json& c) {
  fsdp::AdafactorConfig a;
  a.eps1 = c["eps1"];
  a.eps2 = c["eps2"];
  a.clip_threshold = c["clip_threshold"];
  a.decay_rate = c["decay_rate"];
  a.beta1 = c["beta1"];
  a.weight_decay = c["weight_decay"];
  a.scale_parameter = c["scale_parameter"];
  a.relative_step = c["relative_step"];
  a.warmup_init = c["warmup_init"];
  return a;
}

// Runs case `c` (an entry of cases.json in `dir`) on this rank of `group` and checks it within
// `bound`; returns the largest error seen.
inline double run_adafactor_case(const nlohmann::json& c, const std::string& dir, dist::Communicator* group,
                                 at::Device device, double bound) {
  const int shards = group == nullptr ? 1 : group->size(), shard = group == nullptr ? 0 : group->rank();
  const auto file = [&](const std::string& tensor, const char* what) {
    return read_raw<float>(dir, c["files"][tensor + "." + what].get<std::string>());
  };
  fsdp::Adafactor optimizer(adafactor_config(c["config"]), group);
  std::vector<fsdp::FlatLayout> layouts;
  for (const nlohmann::json& flat : c["flats"]) {
    std::vector<fsdp::FlatLayout::Entry> entries;
    for (const nlohmann::json& t : flat) entries.push_back({t["name"], t["shape"].get<std::vector<int64_t>>()});
    layouts.emplace_back(entries, shards);
  }
  std::vector<at::Tensor> params, grads;
  std::vector<std::vector<std::vector<float>>> steps_of;  // [flat][tensor]: every step's gradient
  for (const fsdp::FlatLayout& layout : layouts) {
    at::Tensor p = at::zeros({layout.shard_numel()}, at::kFloat);
    for (const fsdp::ShardPiece& piece : layout.pieces_in_shard(shard)) {
      const std::vector<float> p0 = file(layout.params()[piece.param].name, "param0");
      std::copy_n(p0.begin() + piece.param_offset, piece.length, p.data_ptr<float>() + piece.shard_offset);
    }
    params.push_back(p.to(device));
    grads.push_back(at::zeros({layout.shard_numel()}, at::TensorOptions().device(device)));
    optimizer.add(params.back(), grads.back(), layout, shard);
  }
  const int steps = c["steps"];
  for (int s = 0; s < steps; ++s) {
    for (size_t f = 0; f < layouts.size(); ++f) {
      at::Tensor g = at::zeros({layouts[f].shard_numel()}, at::kFloat);
      for (const fsdp::ShardPiece& piece : layouts[f].pieces_in_shard(shard)) {
        const fsdp::ParamSpan& p = layouts[f].params()[piece.param];
        const std::vector<float> all = file(p.name, "grads");
        std::copy_n(all.begin() + s * p.numel + piece.param_offset, piece.length, g.data_ptr<float>() + piece.shard_offset);
      }
      grads[f].copy_(g);
    }
    optimizer.step(c["lr"].get<double>());
  }
  double worst = 0;
  const auto check = [&](const std::string& what, const at::Tensor& got, const std::vector<float>& want, int64_t offset,
                         bool elementwise) {
    const at::Tensor host = got.cpu().contiguous();
    const double e = relative_error(host.data_ptr<float>(), want, offset, host.numel(), elementwise);
    EXPECT_LE(e, bound) << what << " of case " << c["name"].get<std::string>() << " on shard " << shard << " of "
                        << shards;
    worst = std::max(worst, e);
  };
  for (size_t f = 0; f < layouts.size(); ++f) {
    for (const fsdp::ShardPiece& piece : layouts[f].pieces_in_shard(shard)) {
      const std::string& name = layouts[f].params()[piece.param].name;
      check(name, params[f].narrow(0, piece.shard_offset, piece.length), file(name, "param"), piece.param_offset, false);
      if (optimizer.exp_avg(f).defined())
        check(name + " exp_avg", optimizer.exp_avg(f).narrow(0, piece.shard_offset, piece.length), file(name, "m"),
              piece.param_offset, false);
    }
    // The statistics are whole on every rank.
    const char* keys[] = {"row", "col", "vec"};
    for (const fsdp::AdafactorStatistic kind : {fsdp::kRowMeans, fsdp::kColumnMeans, fsdp::kVectorMoments}) {
      const fsdp::Adafactor::Statistics s = optimizer.statistics(f, kind, /*whole=*/true);
      for (const fsdp::ParamSpan& p : s.layout->params())
        check(fmt::format("{} {}", p.name, fsdp::kAdafactorStatistics[kind]), s.tensor.narrow(0, p.offset, p.numel),
              file(p.name, keys[kind]), 0, true);
    }
  }
  EXPECT_EQ(optimizer.step_count(), steps);
  return worst;
}

}  // namespace shardtune::testing_support
