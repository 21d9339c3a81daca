#include "runtime/model/generate.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>

#include "common/error.h"
#include "runtime/model/kv_cache.h"

namespace shardtune::model {
namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

TokenSampler::TokenSampler(const SamplingOptions& options) : options_(options), rng_(options.seed) {
  ST_CHECK(options.temperature >= 0 && options.top_k >= 0 && options.top_p > 0 && options.top_p <= 1,
           common::ErrorKind::kUsage, "sampling needs temperature >= 0, top_k >= 0 and 0 < top_p <= 1");
}

int32_t TokenSampler::next(const at::Tensor& logits) {
  const at::Tensor host = logits.detach().to(at::kCPU, at::kDouble).contiguous().view({-1});
  const double* l = host.data_ptr<double>();
  const int64_t n = host.numel();
  if (options_.temperature == 0) return static_cast<int32_t>(std::max_element(l, l + n) - l);  // the first of equals
  // Most likely first (the lower id first among equals).
  std::vector<int32_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return l[a] > l[b]; });
  size_t keep = order.size();
  if (options_.top_k > 0) keep = std::min<size_t>(keep, static_cast<size_t>(options_.top_k));
  // Relative to the largest before dividing: at any temperature > 0 the most likely token weighs 1
  // (a tiny temperature would overflow l / T to infinity, and inf - inf is NaN).
  std::vector<double> p(keep);
  const double top = l[order[0]];
  double sum = 0;
  for (size_t i = 0; i < keep; ++i) sum += p[i] = std::exp((l[order[i]] - top) / options_.temperature);
  if (options_.top_p < 1) {
    // The fewest tokens whose probabilities reach top_p (at least one).
    double cumulative = 0;
    size_t k = 0;
    while (k < keep && cumulative < options_.top_p * sum) cumulative += p[k++];
    keep = std::max<size_t>(k, 1);
    sum = std::accumulate(p.begin(), p.begin() + static_cast<std::ptrdiff_t>(keep), 0.0);
  }
  const double u = static_cast<double>(rng_() >> 11) * 0x1.0p-53 * sum;  // uniform in [0, sum)
  double cumulative = 0;
  for (size_t i = 0; i < keep; ++i)
    if (u < (cumulative += p[i])) return order[i];
  return order[keep - 1];
}

Generation generate(const LlamaForCausalLM& model, const std::vector<int32_t>& prompt, const GenerateOptions& options,
                    const std::function<void(int32_t)>& on_token) {
  ST_CHECK(!prompt.empty(), common::ErrorKind::kUsage, "an empty prompt: give at least one token (BOS)");
  const at::TensorOptions ids_options = at::TensorOptions().dtype(at::kLong).device(model.options().device());
  KvCache cache(model.config(), 1, static_cast<int64_t>(prompt.size()) + options.max_new_tokens, model.options());
  TokenSampler sampler(options.sampling);
  Generation out;
  const std::vector<int64_t> ids(prompt.begin(), prompt.end());
  auto start = std::chrono::steady_clock::now();
  at::Tensor logits = cache.forward(model, at::tensor(ids, at::kLong).to(ids_options).view({1, -1}));
  for (int64_t i = 0; i < options.max_new_tokens; ++i) {
    const at::Tensor last = logits.select(1, logits.size(1) - 1).select(0, 0);
    if (options.on_logits) options.on_logits(last);
    const int32_t token = sampler.next(last);
    if (i == 0) {
      out.prefill_seconds = seconds_since(start);
      start = std::chrono::steady_clock::now();
    }
    out.tokens.push_back(token);
    if (on_token) on_token(token);
    if (std::find(options.stop_ids.begin(), options.stop_ids.end(), token) != options.stop_ids.end()) {
      out.stopped = true;
      break;
    }
    if (i + 1 < options.max_new_tokens)
      logits = cache.forward(model, at::full({1, 1}, static_cast<int64_t>(token), ids_options));
  }
  out.decode_seconds = seconds_since(start);
  return out;
}

}  // namespace shardtune::model
