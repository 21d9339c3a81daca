#!/usr/bin/env python3
"""An independent reference for shardtune's NF4 (runtime/quant/nf4.h): bitsandbytes' 4-bit
NormalFloat quantisation with double-quantised scales, written in numpy from bitsandbytes'
published algorithm (its CUDA kernels' choices), vectorised where shardtune loops:

  - NF4 code = the number of kernel thresholds the normalised value x * fp32(1 / absmax) exceeds
    strictly (NaN: 0); the even element in the high nibble; an odd tensor's last low nibble codes
    the zero its block is padded with;
  - the 8-bit dynamic map built as create_dynamic_map(signed=True) does, with torch's float32
    linspace (each half from its own end, one fused multiply-add: computed exactly in float64 and
    rounded once); an 8-bit code is the nearest map value by fp32 midpoints, an exact tie going to
    the even index;
  - double quantisation: offset = the mean of the tensor's absmax, (absmax - offset) in blocks of
    256 against their own absmax2;
  - dequantisation fp32(NF4[c] * fp32(fp32(map[q] * absmax2) + offset)).

For each case it writes the input (float32), bitsandbytes' arrays (packed, absmax or qabsmax and
absmax2, offset) and the dequantised float32 values, as raw little-endian files, and cases.json
describing them; plus code cases: values at and around every threshold and midpoint with the
codes they must get. tests/unit/nf4_test.cpp holds shardtune to them bit for bit.

Usage: python3 tests/reference/nf4_reference.py OUT_DIR
"""
import json
import math
import os
import sys
from fractions import Fraction

import numpy as np

F32 = np.float32
NF4 = np.array([-1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453, -0.28444138169288635,
                -0.18477343022823334, -0.09105003625154495, 0.0, 0.07958029955625534, 0.16093020141124725,
                0.24611230194568634, 0.33791524171829224, 0.44070982933044434, 0.5626170039176941,
                0.7229568362236023, 1.0], F32)


def f32_literal(text):
    """A C float literal: the decimal rounded once, to the nearest float32 (ties to even). Going
    through a Python float first would round twice, and does differ for some of these."""
    exact = Fraction(text)
    guess = F32(float(text))
    candidates = [np.nextafter(guess, F32(-np.inf)), guess, np.nextafter(guess, F32(np.inf))]
    def key(c):
        return (abs(Fraction(float(c)) - exact), int(np.array(c, F32).view(np.uint32)) & 1)
    return min(candidates, key=key)


# The literals of bitsandbytes' dQuantizeNF4 (csrc/kernels.cu), as its compiler rounds them.
THRESHOLDS = np.array([f32_literal(t) for t in (
    "-0.8480964004993439", "-0.6106329262256622", "-0.4599952697753906", "-0.33967943489551544",
    "-0.23460740596055984", "-0.13791173323988914", "-0.045525018125772476", "0.03979014977812767",
    "0.1202552504837513", "0.2035212516784668", "0.2920137718319893", "0.3893125355243683",
    "0.5016634166240692", "0.6427869200706482", "0.8614784181118011")], F32)


def linspace_f32(n):
    start, end = F32(0.1), F32(1.0)
    step = F32(F32(end - start) / F32(n - 1))
    # start + step * i in float64 is exact here (24-bit by at most 7-bit integers): one rounding.
    return np.array([F32(float(start) + float(step) * i) if i < n // 2 else F32(float(end) - float(step) * (n - 1 - i))
                     for i in range(n)], F32)


def dynamic_map():
    data = []
    for i in range(7):
        b = linspace_f32(2 ** i + 1)
        means = (b[:-1] + b[1:]) / F32(2)
        scale = F32(10.0 ** (i - 6))
        data += [float(v) for v in scale * means] + [float(v) for v in -scale * means]
    data += [0.0, 1.0]
    assert len(data) == 256
    return np.array(sorted(data), F32)


MAP = dynamic_map()
MIDPOINTS = ((MAP[:-1] + MAP[1:]) * F32(0.5)).astype(F32)


def nf4_codes(x):
    x = np.asarray(x, F32)
    return (x[..., None] > THRESHOLDS).sum(-1).astype(np.uint8)  # NaN exceeds nothing: 0


def dynamic_codes(x):
    x = np.asarray(x, F32)
    q = np.searchsorted(MIDPOINTS, x, side="left")  # midpoints strictly below x
    tie = (q < 255) & (MIDPOINTS[np.minimum(q, 254)] == x)
    q = np.where(tie & (q % 2 == 1), q + 1, q)  # a tie between q and q + 1 goes to the even one
    return np.where(np.isnan(x), 0, q).astype(np.uint8)


def quantize(x, block, double_quant):
    n = x.size
    nb = -(-n // block)
    padded = np.zeros(nb * block, F32)
    padded[:n] = x
    blocks = padded.reshape(nb, block)
    absmax = np.abs(blocks).max(1).astype(F32)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        inv = (F32(1) / absmax).astype(F32)
        normed = (blocks * inv[:, None]).astype(F32)
    codes = nf4_codes(normed).reshape(-1)[: n + (n % 2)]
    packed = (codes[0::2] << 4 | codes[1::2]).astype(np.uint8)
    out = {"packed": packed}
    if not double_quant:
        out["absmax"] = absmax
        return out
    offset = F32(math.fsum(float(a) for a in absmax) / nb)
    centred = (absmax - offset).astype(F32)
    nb2 = -(-nb // 256)
    c = np.zeros(nb2 * 256, F32)
    c[:nb] = centred
    c = c.reshape(nb2, 256)
    mask = (np.arange(nb2 * 256) < nb).reshape(nb2, 256)
    absmax2 = np.where(mask, np.abs(c), F32(0)).max(1).astype(F32)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        q = dynamic_codes((c * (F32(1) / absmax2)[:, None]).astype(F32)).reshape(-1)[:nb]
    out.update(qabsmax=q, absmax2=absmax2, offset=np.array([offset], F32))
    return out


def dequantize(q, n, block, double_quant):
    if double_quant:
        nb = q["qabsmax"].size
        scaled = (MAP[q["qabsmax"]] * np.repeat(q["absmax2"], 256)[:nb]).astype(F32)
        absmax = (scaled + q["offset"][0]).astype(F32)
    else:
        absmax = q["absmax"]
    codes = np.stack([q["packed"] >> 4, q["packed"] & 15], 1).reshape(-1)[:n]
    return (NF4[codes] * np.repeat(absmax, block)[:n]).astype(F32)


def cases(rng):
    normal = lambda n, s=0.02: (rng.standard_normal(n) * s).astype(F32)
    zeros_inside = normal(64 * 300)
    zeros_inside[64 * 5:64 * 9] = 0  # four all-zero blocks
    zeros_inside[64 * 290:] = 0      # and a tail of them
    wide = normal(64 * 40 + 13)
    wide[:64] *= F32(1e30)
    wide[64:128] = F32(3.0e38) * np.sign(wide[64:128])
    wide[128:192] = F32(1e-40)       # subnormal
    wide[192:256] *= F32(1e-30)
    wide[256:320] = -wide[256:320]
    ties = np.zeros(64 * 16, F32)     # every NF4 threshold met exactly: absmax 1 in each block
    for b in range(16):
        ties[b * 64] = 1
        ties[b * 64 + 1:b * 64 + 16] = THRESHOLDS
        ties[b * 64 + 16:b * 64 + 31] = np.nextafter(THRESHOLDS, F32(2))
        ties[b * 64 + 31:b * 64 + 46] = np.nextafter(THRESHOLDS, F32(-2))
    yield "normal", normal(4096), 64, True
    yield "not_a_multiple_of_64", normal(1000), 64, True
    yield "several_records", normal(64 * 256 * 2 + 77, 0.5), 64, True
    yield "zero_blocks", zeros_inside, 64, True
    yield "zero_blocks_single", zeros_inside, 64, False
    yield "magnitudes", wide, 64, True
    yield "magnitudes_single", wide, 64, False
    yield "odd", normal(63), 64, True
    yield "one", np.array([0.5], F32), 64, True
    yield "all_zero", np.zeros(200, F32), 64, True
    yield "thresholds", ties, 64, False
    yield "block_32", normal(32 * 300 + 5), 32, True
    yield "block_128", normal(128 * 300 + 1), 128, True
    yield "block_4096", normal(4096 * 3 + 100), 4096, True
    yield "block_4096_single", normal(4096 * 3 + 100), 4096, False


def code_cases():
    around = lambda v: np.concatenate([v, np.nextafter(v, F32(2)), np.nextafter(v, F32(-2))]).astype(F32)
    nf4_x = np.concatenate([around(THRESHOLDS), NF4, [F32(np.nan), F32(-2), F32(2), F32(-0.0)]]).astype(F32)
    dyn_x = np.concatenate([around(MIDPOINTS), MAP, [F32(np.nan), F32(-2), F32(2), F32(-0.0)]]).astype(F32)
    return nf4_x, nf4_codes(nf4_x), dyn_x, dynamic_codes(dyn_x)


def main(out):
    os.makedirs(out, exist_ok=True)
    rng = np.random.default_rng(20261126)
    index = {"cases": []}

    def save(name, array):
        array.tofile(os.path.join(out, name))
        return name

    for name, x, block, dq in cases(rng):
        q = quantize(x, block, dq)
        deq = dequantize(q, x.size, block, dq)
        entry = {"name": name, "numel": int(x.size), "block_size": block, "double_quant": dq,
                 "input": save(f"{name}.input.f32", x), "dequantized": save(f"{name}.dequantized.f32", deq)}
        for key, value in q.items():
            entry[key] = save(f"{name}.{key}.bin", value)
        index["cases"].append(entry)
    nf4_x, nf4_q, dyn_x, dyn_q = code_cases()
    index["nf4_codes"] = {"x": save("nf4_codes.x.f32", nf4_x), "code": save("nf4_codes.code.u8", nf4_q), "count": int(nf4_x.size)}
    index["dynamic_codes"] = {"x": save("dyn_codes.x.f32", dyn_x), "code": save("dyn_codes.code.u8", dyn_q),
                              "count": int(dyn_x.size)}
    index["dynamic_map"] = save("dynamic_map.f32", MAP)
    with open(os.path.join(out, "cases.json"), "w") as f:
        json.dump(index, f, indent=1)
    print(f"{len(index['cases'])} NF4 cases, {nf4_x.size} NF4 and {dyn_x.size} 8-bit code cases in {out}")


if __name__ == "__main__":
    main(sys.argv[1])
