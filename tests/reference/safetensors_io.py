"""safetensors files and Hugging Face folders read and written with torch alone, and which weights
QLoRA stores in NF4: what the reference generators (llama_torch_reference.py, make_bnb_folder.py)
and the tests' checks share."""
import json
import os
import struct

import torch

SAFETENSORS_DTYPES = {torch.float32: "F32", torch.bfloat16: "BF16", torch.int64: "I64", torch.uint8: "U8"}


def write_safetensors(path, tensors):
    """The safetensors layout: u64 little-endian header size, JSON header padded with spaces to a
    multiple of 8, then the tensors' bytes back to back in header order."""
    header, blobs, offset = {}, [], 0
    for name, t in tensors.items():
        raw = t.contiguous()
        data = (raw.view(torch.int16) if raw.dtype == torch.bfloat16 else raw).numpy().tobytes()
        header[name] = {"dtype": SAFETENSORS_DTYPES[t.dtype], "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    header["__metadata__"] = {"format": "pt"}
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(raw)))
        f.write(raw)
        for b in blobs:
            f.write(b)


def read_safetensors(path):
    """Every tensor of a safetensors file (F32, BF16, F16, I64) by name."""
    dtypes = {"F32": torch.float32, "BF16": torch.bfloat16, "F16": torch.float16, "I64": torch.int64}
    with open(path, "rb") as f:
        (size,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(size))
        data = f.read()
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        raw = bytearray(data[begin:end])
        dtype = dtypes[info["dtype"]]
        if dtype == torch.bfloat16:
            t = torch.frombuffer(raw, dtype=torch.int16).view(torch.bfloat16)
        else:
            t = torch.frombuffer(raw, dtype=dtype)
        out[name] = t.reshape(info["shape"]).clone()
    return out


def read_folder(folder):
    """config.json and every weight of a Hugging Face model folder."""
    with open(os.path.join(folder, "config.json")) as f:
        cfg = json.load(f)
    files = sorted(n for n in os.listdir(folder) if n.endswith(".safetensors"))
    weights = {}
    for name in files:
        weights.update(read_safetensors(os.path.join(folder, name)))
    return cfg, weights


NF4_PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def is_nf4_weight(name):
    """A block projection's weight: what QLoRA (and bitsandbytes' 4-bit loading) stores in NF4."""
    parts = name.split(".")
    return name.startswith("model.layers.") and parts[-1] == "weight" and parts[-2] in NF4_PROJECTIONS
