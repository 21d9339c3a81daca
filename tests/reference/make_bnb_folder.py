#!/usr/bin/env python3
"""A Hugging Face folder as bitsandbytes' save_pretrained writes a model loaded with
load_in_4bit (NF4), made from a plain folder with the numpy NF4 reference (nf4_reference.py)
instead of bitsandbytes: every block projection X.weight becomes

    X.weight                                  uint8 [(n + 1) / 2, 1], the packed codes
    X.weight.absmax                           uint8 [blocks] (double quantisation) or float32
    X.weight.quant_map                        float32 [16], the NF4 values
    X.weight.nested_absmax, .nested_quant_map float32 [blocks / 256], float32 [256] (double quantisation)
    X.weight.quant_state.bitsandbytes__nf4    uint8, the JSON of the quantisation state

with the same keys, dtypes, shapes and JSON fields as bitsandbytes, and config.json gains its
quantization_config. Everything else is copied as it is. shardtune loads such a folder by reading
each rank's records straight from it; tests compare that with quantising the original.

Usage: python3 tests/reference/make_bnb_folder.py SRC OUT BLOCK_SIZE DOUBLE_QUANT(true|false)
"""
import json
import os
import shutil
import sys

import numpy as np
import torch

import nf4_reference
from safetensors_io import is_nf4_weight, read_folder, write_safetensors

DTYPE_NAMES = {torch.float32: "float32", torch.bfloat16: "bfloat16", torch.float16: "float16"}


def quantised(name, t, block, double_quant):
    x = t.float().numpy().reshape(-1)
    q = nf4_reference.quantize(x, block, double_quant)
    out = {name: torch.from_numpy(q["packed"].copy()).reshape(-1, 1),
           name + ".quant_map": torch.from_numpy(nf4_reference.NF4.copy())}
    state = {"quant_type": "nf4", "blocksize": block, "dtype": DTYPE_NAMES[t.dtype], "shape": list(t.shape)}
    if double_quant:
        out[name + ".absmax"] = torch.from_numpy(q["qabsmax"].copy())
        out[name + ".nested_absmax"] = torch.from_numpy(q["absmax2"].copy())
        out[name + ".nested_quant_map"] = torch.from_numpy(nf4_reference.MAP.copy())
        state.update(nested_blocksize=256, nested_dtype="float32", nested_offset=float(q["offset"][0]))
    else:
        out[name + ".absmax"] = torch.from_numpy(q["absmax"].copy())
    out[name + ".quant_state.bitsandbytes__nf4"] = torch.tensor(list(json.dumps(state).encode()), dtype=torch.uint8)
    return out


def main(src, out, block, double_quant):
    cfg, weights = read_folder(src)
    tensors = {}
    for name, t in weights.items():
        if is_nf4_weight(name):
            tensors.update(quantised(name, t, block, double_quant))
        else:
            tensors[name] = t
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    write_safetensors(os.path.join(out, "model.safetensors"), tensors)
    cfg["quantization_config"] = {
        "_load_in_4bit": True, "_load_in_8bit": False, "bnb_4bit_compute_dtype": "bfloat16",
        "bnb_4bit_quant_storage": "uint8", "bnb_4bit_quant_type": "nf4", "bnb_4bit_use_double_quant": double_quant,
        "llm_int8_enable_fp32_cpu_offload": False, "llm_int8_has_fp16_weight": False, "llm_int8_skip_modules": None,
        "llm_int8_threshold": 6.0, "load_in_4bit": True, "load_in_8bit": False, "quant_method": "bitsandbytes"}
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    for name in os.listdir(src):
        if name.startswith("tokenizer"):
            shutil.copy(os.path.join(src, name), os.path.join(out, name))
    print(f"{out}: {sum(1 for n in tensors if n.endswith('bitsandbytes__nf4'))} NF4 weights, blocks of {block}, "
          f"double quantisation {double_quant}")


if __name__ == "__main__":
    if len(sys.argv) != 5:
        sys.exit(__doc__.strip().splitlines()[-1])
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4] == "true")
