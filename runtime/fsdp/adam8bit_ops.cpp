// The 8-bit block-wise Adam update in ATen operations.
#include "runtime/fsdp/adam8bit_ops.h"

#include <ATen/TensorOperators.h>
#include <ATen/ops/abs.h>
#include <ATen/ops/amax.h>
#include <ATen/ops/from_blob.h>
#include <ATen/ops/full.h>
#include <ATen/ops/full_like.h>
#include <ATen/ops/index_select.h>
#include <ATen/ops/isfinite.h>
#include <ATen/ops/remainder.h>
#include <ATen/ops/signbit.h>
#include <ATen/ops/sqrt.h>
#include <ATen/ops/where.h>
#include <ATen/ops/zeros.h>

#include <algorithm>

#include "common/error.h"
#include "runtime/quant/dynamic_map.h"

namespace shardtune::fsdp {
namespace {

// Blocks worked on at once: the temporaries stay near 50 bytes an element of this many blocks
// (50 MiB on the host; 200 MiB on a GPU, where each piece costs some 70 kernel launches).
int64_t blocks_at_once(const at::Tensor& t) { return t.is_cpu() ? 4096 : 16384; }

at::Tensor lookup(const at::Tensor& map, const at::Tensor& codes) {
  return at::index_select(map, 0, codes.reshape({-1})).view(codes.sizes());
}

}  // namespace

Adam8bitMaps adam8bit_maps(at::Device device) {
  const auto as_tensor = [&](bool is_signed) {
    const std::array<float, 256>& m = quant::dynamic_map(is_signed);
    return at::from_blob(const_cast<float*>(m.data()), {256}, at::TensorOptions().dtype(at::kFloat))
        .to(device, /*non_blocking=*/false, /*copy=*/true);
  };
  return {as_tensor(true), as_tensor(false)};
}

at::Tensor encode_ops(const at::Tensor& map, const at::Tensor& x, bool is_signed) {
  const at::TensorOptions ints = x.options().dtype(at::kInt);
  at::Tensor pivot = at::full(x.sizes(), 127, ints), upper_pivot = at::full(x.sizes(), 255, ints),
             lower_pivot = at::zeros(x.sizes(), ints);
  at::Tensor lower = at::full_like(x, is_signed ? -1.0 : 0.0), upper = at::full_like(x, 1.0);
  at::Tensor val = lookup(map, pivot);
  for (int i = 64; i > 0; i >>= 1) {
    const at::Tensor above = x > val;
    lower_pivot = at::where(above, pivot, lower_pivot);
    lower = at::where(above, val, lower);
    upper_pivot = at::where(above, upper_pivot, pivot);
    upper = at::where(above, upper, val);
    pivot = at::where(above, pivot + i, pivot - i);
    val = lookup(map, pivot);
  }
  const at::Tensor up = at::where(x > (upper + val) * 0.5, upper_pivot, pivot);
  const at::Tensor down = at::where(x < (lower + val) * 0.5, lower_pivot, pivot);
  return at::where(x > val, up, down);
}

void adam8bit_update_ops(const at::Tensor& p, const at::Tensor& g, const at::Tensor& c1, const at::Tensor& c2,
                         const at::Tensor& a1, const at::Tensor& a2, const Adam8bitScalars& s,
                         const Adam8bitMaps& maps) {
  const int64_t n = p.numel(), blocks = a1.numel();
  ST_CHECK(g.numel() == n && blocks == (n + kAdam8bitBlock - 1) / kAdam8bitBlock && a2.numel() == blocks &&
               c1.numel() == blocks * kAdam8bitBlock && c2.numel() == c1.numel(),
           common::ErrorKind::kInternal, "8-bit Adam state of {} blocks for {} elements", blocks, n);
  const at::Tensor pf = p.view({-1}), gf = g.view({-1}), q1 = c1.view({-1}), q2 = c2.view({-1});
  const int64_t at_once = blocks_at_once(p);
  for (int64_t first = 0; first < blocks; first += at_once) {
    const int64_t nb = std::min(at_once, blocks - first), begin = first * kAdam8bitBlock;
    const int64_t valid = std::min(nb * kAdam8bitBlock, n - begin);
    const at::Tensor codes1 = q1.narrow(0, begin, nb * kAdam8bitBlock), codes2 = q2.narrow(0, begin, nb * kAdam8bitBlock);
    if (valid < codes1.numel()) {  // bitsandbytes' phantom elements past the tensor's end
      codes1.narrow(0, valid, codes1.numel() - valid).fill_(128);
      codes2.narrow(0, valid, codes2.numel() - valid).fill_(0);
    }
    at::Tensor grad = at::zeros({nb * kAdam8bitBlock}, p.options().dtype(at::kFloat));
    grad.narrow(0, 0, valid).copy_(gf.narrow(0, begin, valid));
    grad = grad.view({nb, kAdam8bitBlock});
    const at::Tensor finite = at::isfinite(grad);
    const at::Tensor absmax1 = a1.narrow(0, first, nb), absmax2 = a2.narrow(0, first, nb);
    const at::Tensor v = lookup(maps.unsigned_map, codes2.to(at::kInt)).view({nb, kAdam8bitBlock}) * absmax2.unsqueeze(1);
    const at::Tensor s2 = at::where(finite, v * s.beta2 + grad * s.one_minus_beta2 * grad, 0.0);
    const at::Tensor m = lookup(maps.signed_map, codes1.to(at::kInt)).view({nb, kAdam8bitBlock}) * absmax1.unsqueeze(1);
    const at::Tensor s1 = at::where(finite, m * s.beta1 + grad * s.one_minus_beta1, 0.0);
    const at::Tensor max1 = at::amax(at::abs(s1), 1, /*keepdim=*/true), max2 = at::amax(at::abs(s2), 1, true);
    absmax1.copy_(max1.view({nb}));
    absmax2.copy_(max2.view({nb}));

    const at::Tensor step = (s1 / (at::sqrt(s2) + s.c2_eps) * s.step_size).view({-1}).narrow(0, 0, valid);
    const at::Tensor old = pf.narrow(0, begin, valid);
    at::Tensor updated = old.to(at::kFloat) + step;
    if (p.scalar_type() != at::kFloat) updated = updated.to(p.scalar_type()).to(at::kFloat);  // as stored
    if (s.decays) updated = updated * s.decay;
    old.copy_(at::where(finite.view({-1}).narrow(0, 0, valid), updated, old.to(at::kFloat)));

    at::Tensor k1 = encode_ops(maps.signed_map, s1 / max1, true);
    const at::Tensor wrong_sign = at::signbit(lookup(maps.signed_map, k1)) != at::signbit(s1);
    k1 = at::remainder(at::where(wrong_sign, at::where(s1 > 0.0, k1 + 1, k1 - 1), k1), 256);
    codes1.copy_(k1.view({-1}));
    codes2.copy_(encode_ops(maps.unsigned_map, s2 / max2, false).view({-1}));
  }
}

void adam32bit_update_ops(const at::Tensor& p, const at::Tensor& g, const at::Tensor& m, const at::Tensor& v,
                          const Adam8bitScalars& s) {
  const at::Tensor grad = g.to(at::kFloat);
  m.copy_(m * s.beta1 + grad * s.one_minus_beta1);
  v.copy_(v * s.beta2 + (grad * grad) * s.one_minus_beta2);
  at::Tensor updated = p.to(at::kFloat) + m / (at::sqrt(v) + s.c2_eps) * s.step_size;
  if (p.scalar_type() != at::kFloat) updated = updated.to(p.scalar_type()).to(at::kFloat);  // as stored
  if (s.decays) updated = updated * s.decay;
  p.copy_(updated);
}

}  // namespace shardtune::fsdp
