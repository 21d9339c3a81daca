// metrics.jsonl records and MFU.
#include "runtime/train/step_metrics.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <type_traits>
#include <vector>

namespace shardtune::train {
namespace {

// A finite number in the shortest text that reads back to it; JSON has no NaN or infinity.
std::string number(double v) { return std::isfinite(v) ? fmt::format("{}", v) : "null"; }

class Fields {
 public:
  template <typename T>
  Fields& add(std::string_view key, const T& value) {
    text_ += fmt::format("{}\"{}\": {}", text_.empty() ? "{" : ", ", key, value);
    return *this;
  }
  Fields& real(std::string_view key, double value) { return add(key, number(value)); }
  template <typename T>
  Fields& optional(std::string_view key, const std::optional<T>& value) {
    if (!value) return *this;
    if constexpr (std::is_floating_point_v<T>) return real(key, *value);
    return add(key, *value);
  }
  std::string line() const { return text_ + "}\n"; }

 private:
  std::string text_;
};

std::string lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(), [](unsigned char c) { return std::tolower(c); });
  return out;
}

}  // namespace

std::string jsonl_line(const StepRecord& r) {
  Fields f;
  f.add("step", r.step).add("epoch", r.epoch).add("samples", fmt::format("[{}, {}]", r.sample_begin, r.sample_end));
  f.real("loss", r.loss);
  if (r.preference)
    for (const auto& [name, value] : r.preference->named()) f.real(name, value);
  f.real("lr", r.lr).optional("grad_norm", r.grad_norm).optional("loss_scale", r.loss_scale);
  if (r.loss_scale) f.add("skipped", r.skipped ? "true" : "false");
  if (r.nonfinite) f.add("nonfinite", "true");
  if (r.nonfinite_skips > 0) f.add("nonfinite_skips", r.nonfinite_skips);
  f.add("tokens", r.tokens).real("flops", r.flops);
  if (!r.sample_ids.empty()) {
    std::vector<std::string> ranks;
    for (const std::vector<int64_t>& ids : r.sample_ids) ranks.push_back(fmt::format("[{}]", fmt::join(ids, ", ")));
    f.add("sample_ids", fmt::format("[{}]", fmt::join(ranks, ", ")));
  }
  if (!r.sources.empty()) {
    std::vector<std::string> counts;
    for (const auto& [name, count] : r.sources) counts.push_back(fmt::format("\"{}\": {}", name, count));
    f.add("sources", fmt::format("{{{}}}", fmt::join(counts, ", ")));
  }
  // Everything from here on differs between two identical runs.
  f.add("step_seconds", fmt::format("{:.6f}", r.step_seconds));
  f.add("compute_seconds", fmt::format("{:.6f}", std::max(0.0, r.step_seconds - r.comm_wait_seconds - r.data_wait_seconds)));
  f.add("comm_wait_seconds", fmt::format("{:.6f}", r.comm_wait_seconds));
  f.add("data_wait_seconds", fmt::format("{:.6f}", r.data_wait_seconds));
  f.real("tokens_per_second", r.step_seconds > 0 ? static_cast<double>(r.tokens) / r.step_seconds : 0.0);
  f.optional("mfu", r.mfu).optional("counted_flops", r.counted_flops).add("peak_rss_bytes", r.peak_rss_bytes);
  f.optional("gpu_peak_allocated_bytes", r.gpu_peak_allocated_bytes)
      .optional("gpu_peak_reserved_bytes", r.gpu_peak_reserved_bytes);
  return f.line();
}

std::string jsonl_line(const EvalRecord& r) {
  Fields f;
  f.add("eval_epoch", r.epoch).add("after_step", r.after_step).real("val_loss", r.loss);
  if (r.preference) {  // a DPO loss has no perplexity
    for (const auto& [name, value] : r.preference->named()) f.real("val_" + name, value);
    f.add("val_batches", r.batches).add("val_pairs", r.rows);
  } else {
    f.real("val_perplexity", std::exp(r.loss)).add("val_batches", r.batches).add("val_rows", r.rows);
  }
  f.add("val_tokens", r.tokens);
  if (!r.sources.empty()) {
    std::vector<std::string> parts;
    for (const EvalRecord::Source& s : r.sources) {
      Fields part;
      part.real("val_loss", s.loss);
      if (!r.preference) part.real("val_perplexity", std::exp(s.loss));
      part.add(r.preference ? "val_pairs" : "val_rows", s.rows).add("val_tokens", s.tokens);
      std::string text = part.line();
      text.pop_back();  // the line's '\n'
      parts.push_back(fmt::format("\"{}\": {}", s.name, text));
    }
    f.add("val_sources", fmt::format("{{{}}}", fmt::join(parts, ", ")));
  }
  return f.line();
}

std::optional<double> gpu_bf16_peak_flops(std::string_view device_name) {
  struct Peak {
    std::vector<std::string_view> parts;  // every one must appear in the name (case-insensitive)
    double flops;
  };
  // Dense (no sparsity) bf16 tensor-core peaks from NVIDIA's data sheets; the more specific
  // names first, since "H100" is also in "H100 PCIe".
  static const std::array<Peak, 9> table{{
      {{"gb200"}, 2.5e15},
      {{"b200"}, 2.25e15},
      {{"h200", "nvl"}, 836e12},
      {{"h200"}, 989e12},
      {{"h100", "nvl"}, 835e12},
      {{"h100", "pcie"}, 756e12},
      {{"h100"}, 989e12},
      {{"a100"}, 312e12},
      {{"l40s"}, 362e12},
  }};
  const std::string name = lower(device_name);
  for (const Peak& p : table)
    if (std::all_of(p.parts.begin(), p.parts.end(),
                    [&](std::string_view part) { return name.find(part) != std::string::npos; }))
      return p.flops;
  return std::nullopt;
}

double model_flops_utilisation(double flops, double seconds, double peak_flops_per_rank, int ranks) {
  if (seconds <= 0 || peak_flops_per_rank <= 0 || ranks <= 0) return 0;
  return flops / seconds / (peak_flops_per_rank * ranks);
}

}  // namespace shardtune::train
