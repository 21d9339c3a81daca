// Rotary embeddings, mirroring transformers' LlamaRotaryEmbedding and _compute_llama3_parameters
// operation by operation, so fp32 results agree to the last bits.
#include "runtime/model/rope.h"

#include <ATen/TensorOperators.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/pow.h>
#include <ATen/ops/where.h>

#include <cmath>

namespace shardtune::model {

at::Tensor rope_inv_freq(const LlamaConfig& config) {
  const int64_t dim = config.head_dim;
  at::Tensor exponent = at::arange(0, dim, 2, at::kLong).to(at::kFloat) / static_cast<double>(dim);
  at::Tensor inv_freq = 1.0 / at::pow(config.rope_theta, exponent);
  const RopeScaling& s = config.rope_scaling;
  if (s.type == "linear") return inv_freq / s.factor;
  if (s.type != "llama3") return inv_freq;
  const double old_context = static_cast<double>(s.original_max_position_embeddings);
  const double low_freq_wavelen = old_context / s.low_freq_factor;
  const double high_freq_wavelen = old_context / s.high_freq_factor;
  at::Tensor wavelen = 2.0 * M_PI / inv_freq;
  // Long wavelengths are stretched by `factor`, short ones kept, the band between interpolated.
  at::Tensor scaled = at::where(wavelen > low_freq_wavelen, inv_freq / s.factor, inv_freq);
  at::Tensor smooth = (old_context / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
  at::Tensor smoothed = (1 - smooth) * scaled / s.factor + smooth * scaled;
  at::Tensor medium = (wavelen >= high_freq_wavelen).logical_and(wavelen <= low_freq_wavelen);
  return at::where(medium, smoothed, scaled);
}

RopeTables rope_tables(const at::Tensor& inv_freq, const at::Tensor& position_ids, at::ScalarType dtype) {
  // (B, T, 1) * (1, 1, D/2): the same products as transformers' (D/2 x 1) @ (1 x T) matmul.
  const at::Tensor freq = inv_freq.to(position_ids.device(), inv_freq.scalar_type(), /*non_blocking=*/true);
  at::Tensor freqs = position_ids.to(at::kFloat).unsqueeze(-1) * freq.view({1, 1, -1});
  at::Tensor emb = at::cat({freqs, freqs}, -1);
  return {emb.cos().to(dtype), emb.sin().to(dtype)};
}

at::Tensor apply_rope(const at::Tensor& x, const RopeTables& rope) {
  const int64_t half = x.size(-1) / 2;
  at::Tensor rotated = at::cat({-x.narrow(-1, half, half), x.narrow(-1, 0, half)}, -1);
  // cos/sin (B, T, D) broadcast over heads: (B, 1, T, D).
  return x * rope.cos.unsqueeze(1) + rotated * rope.sin.unsqueeze(1);
}

}  // namespace shardtune::model
