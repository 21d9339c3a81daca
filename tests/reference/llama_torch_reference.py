#!/usr/bin/env python3
"""A second, independent reference for shardtune's Llama: the Hugging Face Llama computation
written out in plain PyTorch, with its own safetensors writer.

It follows transformers' modeling_llama (eager attention): RMSNorm computed as
weight * (x * rsqrt(mean(x^2) + eps)); rotary embeddings with cat(freqs, freqs) and
rotate_half (first half negated second half), with "linear" and "llama3" rope_scaling as
transformers' rope initialisation computes them; grouped-query attention repeating each key/value
head over consecutive query heads; softmax(q k^T / sqrt(head_dim)) causally masked; SwiGLU
down(silu(gate(x)) * up(x)); optional biases; a tied or separate head; and the causal LM loss
(token t predicts t+1, -100 ignored, mean over counted tokens). Packed rows restart their
position ids at 0 and attend only within their document.

For each configuration of tiny_llama_configs.py it writes a folder as transformers'
save_pretrained would (config.json and model.safetensors in float32, or, for the tied model,
bfloat16 shards with model.safetensors.index.json), and reference.safetensors with what this
implementation computed in float64 from the stored weights:

    input_ids, labels, [position_ids]   I64 (B, T)
    logits F32 (B, T, V), loss F32 (), grad.<name> F32 for every parameter
    greedy_prompt I64 (4,), greedy_ids I64 (12,), greedy_margin F32 (12,): a greedy decode of
    12 tokens after the first row's first 4, recomputing the sequence each step (not packed)

tests/unit/hf_reference_test.cpp (TorchReference) matches shardtune against these folders; the
folders made by transformers itself (make_llama_fixtures.py) are the primary reference, this
is a cross-check that needs only Debian's python3-torch.

QLoRA (qlora-<config>/, with qlora.json giving the NF4 format): the same on the base's block
projections quantised to NF4 by nf4_reference.py and dequantised; reference.safetensors also holds
dequantized.<name>, those weights as QLoRA computes with them, and base-nf4/ is the base as
bitsandbytes' save_pretrained stores it in 4 bits (make_bnb_folder.py).

LoRA (lora-<config>/): PEFT's lora.Linear written out, y = W x + b + (alpha / r) B A x on the
targeted projections and the head, the base frozen. Each folder holds base/ (the base model),
adapter/ (a PEFT adapter folder as peft's save_pretrained writes it) and reference.safetensors with
logits, loss and grad.<adapter name> for every adapter, for a batch of 12 rows whose every token
counts (so any even split over 1 to 4 ranks averages to the same loss).

Usage: python3 tests/reference/llama_torch_reference.py OUT_DIR
"""
import json
import math
import os
import shutil
import struct
import sys

import torch
import torch.nn.functional as F

from safetensors_io import is_nf4_weight, read_folder, read_safetensors, write_safetensors  # noqa: F401
from tiny_llama_configs import CONFIGS, SEED, inputs, packed_position_ids

def head_dim(cfg):
    return cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]


def parameter_shapes(cfg):
    """Every parameter under its Hugging Face name, in Hugging Face's order."""
    h, inter, hd = cfg["hidden_size"], cfg["intermediate_size"], head_dim(cfg)
    q, kv = cfg["num_attention_heads"] * hd, cfg["num_key_value_heads"] * hd
    shapes = {"model.embed_tokens.weight": (cfg["vocab_size"], h)}
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        for proj, (out, inp) in [("q_proj", (q, h)), ("k_proj", (kv, h)), ("v_proj", (kv, h)), ("o_proj", (h, q))]:
            shapes[p + f"self_attn.{proj}.weight"] = (out, inp)
            if cfg["attention_bias"]:
                shapes[p + f"self_attn.{proj}.bias"] = (out,)
        for proj, (out, inp) in [("gate_proj", (inter, h)), ("up_proj", (inter, h)), ("down_proj", (h, inter))]:
            shapes[p + f"mlp.{proj}.weight"] = (out, inp)
            if cfg["mlp_bias"]:
                shapes[p + f"mlp.{proj}.bias"] = (out,)
        shapes[p + "input_layernorm.weight"] = (h,)
        shapes[p + "post_attention_layernorm.weight"] = (h,)
    shapes["model.norm.weight"] = (h,)
    if not cfg["tie_word_embeddings"]:
        shapes["lm_head.weight"] = (cfg["vocab_size"], h)
    return shapes


def random_weights(cfg, generator, dtype):
    """Weights large enough that attention is far from uniform (so position and mask errors show)
    and norm weights away from 1 (so a dropped norm weight shows), stored in `dtype`."""
    weights = {}
    for name, shape in parameter_shapes(cfg).items():
        if name.endswith("layernorm.weight") or name == "model.norm.weight":
            w = 1.0 + 0.2 * torch.randn(shape, generator=generator)
        elif name == "model.embed_tokens.weight":
            w = 0.5 * torch.randn(shape, generator=generator)
        else:
            w = 0.1 * torch.randn(shape, generator=generator)
        weights[name] = w.to(dtype)
    return weights


def inv_freq(cfg):
    hd = head_dim(cfg)
    # transformers 5 writes both inside rope_parameters.
    scaling = cfg.get("rope_scaling") or cfg.get("rope_parameters")
    theta = cfg["rope_theta"] if "rope_theta" in cfg else scaling["rope_theta"]
    inv = 1.0 / (theta ** (torch.arange(0, hd, 2, dtype=torch.float64) / hd))
    kind = scaling and scaling.get("rope_type", scaling.get("type"))
    if not kind or kind == "default":
        return inv
    if kind == "linear":
        return inv / scaling["factor"]
    assert kind == "llama3", kind
    factor, low, high = scaling["factor"], scaling["low_freq_factor"], scaling["high_freq_factor"]
    old_context = scaling["original_max_position_embeddings"]
    wavelen = 2 * math.pi / inv
    # Long wavelengths are divided by factor, short ones kept, the band between interpolated.
    scaled = torch.where(wavelen > old_context / low, inv / factor, inv)
    smooth = (old_context / wavelen - low) / (high - low)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    medium = (wavelen >= old_context / high) & (wavelen <= old_context / low)
    return torch.where(medium, smoothed, scaled)


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def attention_allowed(position_ids):
    """(B, T, T) bool: causal, and within the document (a document begins wherever the position
    does not continue the previous one)."""
    b, t = position_ids.shape
    starts = torch.ones(b, t, dtype=torch.int64)
    starts[:, 1:] = (position_ids[:, 1:] != position_ids[:, :-1] + 1).long()
    doc = starts.cumsum(1)
    causal = torch.ones(t, t, dtype=torch.bool).tril()
    return causal & (doc[:, :, None] == doc[:, None, :])


def rms_norm(x, weight, eps):
    return weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))


def linear(x, w, name, lora_scale=None):
    """x W^T + b, plus LoRA's lora_scale * (x A^T) B^T where the module has an adapter (PEFT's
    lora.Linear without dropout)."""
    y = F.linear(x, w[name + ".weight"], w.get(name + ".bias"))
    if name + ".lora_A.weight" in w:
        y = y + F.linear(F.linear(x, w[name + ".lora_A.weight"]), w[name + ".lora_B.weight"]) * lora_scale
    return y


def forward(cfg, w, input_ids, position_ids, lora_scale=None):
    b, t = input_ids.shape
    heads, kv_heads, hd, eps = cfg["num_attention_heads"], cfg["num_key_value_heads"], head_dim(cfg), cfg["rms_norm_eps"]
    angles = position_ids.double()[:, :, None] * inv_freq(cfg)[None, None, :]
    emb = torch.cat((angles, angles), dim=-1)[:, None]  # (B, 1, T, hd)
    cos, sin = emb.cos(), emb.sin()
    allowed = attention_allowed(position_ids)[:, None]  # (B, 1, T, T)

    x = w["model.embed_tokens.weight"][input_ids]
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        h = rms_norm(x, w[p + "input_layernorm.weight"], eps)
        q = linear(h, w, p + "self_attn.q_proj", lora_scale).view(b, t, heads, hd).transpose(1, 2)
        k = linear(h, w, p + "self_attn.k_proj", lora_scale).view(b, t, kv_heads, hd).transpose(1, 2)
        v = linear(h, w, p + "self_attn.v_proj", lora_scale).view(b, t, kv_heads, hd).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        k = k.repeat_interleave(heads // kv_heads, dim=1)  # query head j reads kv head j // groups
        v = v.repeat_interleave(heads // kv_heads, dim=1)
        scores = (q @ k.transpose(-1, -2)) / math.sqrt(hd)
        probs = scores.masked_fill(~allowed, float("-inf")).softmax(-1)
        attn = (probs @ v).transpose(1, 2).reshape(b, t, heads * hd)
        x = x + linear(attn, w, p + "self_attn.o_proj", lora_scale)
        h = rms_norm(x, w[p + "post_attention_layernorm.weight"], eps)
        gated = F.silu(linear(h, w, p + "mlp.gate_proj", lora_scale)) * linear(h, w, p + "mlp.up_proj", lora_scale)
        x = x + linear(gated, w, p + "mlp.down_proj", lora_scale)
    x = rms_norm(x, w["model.norm.weight"], eps)
    head = w["model.embed_tokens.weight"] if cfg["tie_word_embeddings"] else w["lm_head.weight"]
    logits = x @ head.T
    if "lm_head.lora_A.weight" in w:
        logits = logits + (x @ w["lm_head.lora_A.weight"].T) @ w["lm_head.lora_B.weight"].T * lora_scale
    return logits


GREEDY_PROMPT, GREEDY_NEW = 4, 12


def greedy_decode(cfg, w, prompt):
    """Greedy decoding without a cache: each new token is the argmax (the lowest id of equal ones) of
    the last position's float64 logits, the whole sequence recomputed each step. Also the margin of
    each choice (its logit minus the runner-up's, over the largest logit's magnitude), so a test can
    see that the choice is not a near tie that float32 rounding could flip."""
    ids, margins = prompt.tolist(), []
    with torch.no_grad():
        for _ in range(GREEDY_NEW):
            x = torch.tensor([ids])
            last = forward(cfg, w, x, torch.arange(len(ids))[None])[0, -1]
            top = torch.topk(last, 2).values
            margins.append(((top[0] - top[1]) / last.abs().max()).item())
            ids.append(int(torch.argmax(last)))
    return {"greedy_prompt": prompt.contiguous(), "greedy_ids": torch.tensor(ids[len(prompt):]),
            "greedy_margin": torch.tensor(margins, dtype=torch.float32)}


def causal_lm_loss(logits, labels):
    v = logits.shape[-1]
    return F.cross_entropy(logits[:, :-1].reshape(-1, v), labels[:, 1:].reshape(-1), ignore_index=-100)


def save_folder(folder, cfg, weights, shards, dtype_name):
    shutil.rmtree(folder, ignore_errors=True)
    os.makedirs(folder)
    config = dict(cfg, architectures=["LlamaForCausalLM"], model_type="llama", hidden_act="silu",
                  torch_dtype=dtype_name)
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    if shards == 1:
        write_safetensors(os.path.join(folder, "model.safetensors"), weights)
        return
    names = list(weights)
    per = math.ceil(len(names) / shards)
    weight_map = {}
    for s in range(shards):
        file = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
        part = {n: weights[n] for n in names[s * per:(s + 1) * per]}
        write_safetensors(os.path.join(folder, file), part)
        weight_map.update({n: file for n in part})
    total = sum(t.numel() * t.element_size() for t in weights.values())
    with open(os.path.join(folder, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2)


def make_one(folder, cfg, packed=False, shards=1, bf16=False):
    generator = torch.Generator().manual_seed(SEED)
    weights = random_weights(cfg, generator, torch.bfloat16 if bf16 else torch.float32)
    save_folder(folder, cfg, weights, shards, "bfloat16" if bf16 else "float32")

    input_ids, labels = inputs(cfg["vocab_size"])
    position_ids = packed_position_ids() if packed else torch.arange(input_ids.shape[1]).expand_as(input_ids)
    exact = {n: t.double().requires_grad_(True) for n, t in weights.items()}
    logits = forward(cfg, exact, input_ids, position_ids)
    loss = causal_lm_loss(logits, labels)
    loss.backward()

    tensors = {"input_ids": input_ids.contiguous(), "labels": labels.contiguous()}
    if packed:
        tensors["position_ids"] = position_ids.contiguous()
    tensors["logits"] = logits.detach().float()
    tensors["loss"] = loss.detach().float().reshape(())
    tensors.update({"grad." + n: t.grad.float() for n, t in exact.items()})
    if not packed:
        tensors.update(greedy_decode(cfg, {n: t.detach() for n, t in exact.items()}, input_ids[0, :GREEDY_PROMPT]))
    write_safetensors(os.path.join(folder, "reference.safetensors"), tensors)
    with open(os.path.join(folder, "versions.json"), "w") as f:
        json.dump({"reference": "tests/reference/llama_torch_reference.py", "torch": torch.__version__,
                   "seed": SEED}, f, indent=2)
    print(f"{folder}: loss {loss.item():.6f}")


LORA_CASES = {
    # Adapters on every projection and the head, on fp32 weights.
    "lora-llama3-gqa-rope": dict(config="llama3-gqa-rope", r=4, alpha=8.0,
                                 targets=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj",
                                          "down_proj", "lm_head"]),
    # Adapters on two projections and a tied head, on bf16 weights in shards.
    "lora-llama32-tied": dict(config="llama32-tied", r=2, alpha=5.0, targets=["q_proj", "v_proj", "lm_head"]),
}
# QLoRA: the same, on the base's projections quantised to NF4 (nf4_reference.py) and dequantised.
# Blocks of 32 make the MLP's projections two records each, which shards split.
LORA_CASES["qlora-llama-bias-linear"] = dict(config="llama-bias-linear", r=4, alpha=8.0,
                                             targets=["q_proj", "v_proj", "gate_proj", "down_proj"],
                                             nf4=dict(block_size=32, double_quant=True))
LORA_ROWS = 12  # rows of the reference batch: 1, 2, 3 and 4 ranks take equal shares
def nf4_roundtrip(weights, nf4):
    """The base as QLoRA computes with it: every projection of every block quantised to NF4 and
    dequantised (float32), first rounded to nf4["round"] where given (the dtype training quantised
    from), the rest as stored."""
    import numpy as np
    import nf4_reference
    out = dict(weights)
    for name, t in weights.items():
        if is_nf4_weight(name):
            x = t.to(nf4.get("round", t.dtype)).float().numpy().reshape(-1)
            q = nf4_reference.quantize(x, nf4["block_size"], nf4["double_quant"])
            deq = nf4_reference.dequantize(q, x.size, nf4["block_size"], nf4["double_quant"])
            out[name] = torch.from_numpy(np.ascontiguousarray(deq)).view(t.shape)
    return out


def lora_names(cfg, targets):
    """Every adapter under shardtune's (and PEFT's, less its adapter name) name, in model order."""
    names = []
    for name in parameter_shapes(cfg):
        parts = name.split(".")
        if len(parts) >= 3 and parts[-1] == "weight" and parts[-2] in targets:
            names += [name[:-len("weight")] + "lora_A.weight", name[:-len("weight")] + "lora_B.weight"]
    if "lm_head" in targets:
        names += ["lm_head.lora_A.weight", "lm_head.lora_B.weight"]
    return names


def make_lora(folder, case):
    """A base model folder, a PEFT adapter folder written as peft's save_pretrained writes it
    (adapter_config.json; adapter_model.safetensors under base_model.model.<name>), and the
    reference: logits, loss and every adapter's gradient in float64, the base frozen."""
    cfg = CONFIGS[case["config"]]
    tied = cfg["tie_word_embeddings"]
    generator = torch.Generator().manual_seed(SEED)
    weights = random_weights(cfg, generator, torch.bfloat16 if tied else torch.float32)
    shutil.rmtree(folder, ignore_errors=True)
    save_folder(os.path.join(folder, "base"), cfg, weights, 2 if tied else 1, "bfloat16" if tied else "float32")

    h, v = cfg["hidden_size"], cfg["vocab_size"]
    shapes = parameter_shapes(cfg)
    adapters = {}
    for name in lora_names(cfg, case["targets"]):
        base = name.replace(".lora_A.weight", "").replace(".lora_B.weight", "")
        out, inp = shapes[base + ".weight"] if base != "lm_head" else (v, h)
        shape = (case["r"], inp) if ".lora_A." in name else (out, case["r"])
        # B is not zero (as after training), so A's gradients are not zero either.
        adapters[name] = 0.1 * torch.randn(shape, generator=generator)
    os.makedirs(os.path.join(folder, "adapter"))
    write_safetensors(os.path.join(folder, "adapter", "adapter_model.safetensors"),
                      {"base_model.model." + n: t for n, t in adapters.items()})
    with open(os.path.join(folder, "adapter", "adapter_config.json"), "w") as f:
        json.dump({"peft_type": "LORA", "task_type": "CAUSAL_LM", "base_model_name_or_path": "base",
                   "r": case["r"], "lora_alpha": case["alpha"], "lora_dropout": 0.0,
                   "target_modules": case["targets"], "bias": "none", "fan_in_fan_out": False,
                   "inference_mode": True, "init_lora_weights": True, "use_rslora": False, "use_dora": False,
                   "modules_to_save": None, "layers_to_transform": None, "layers_pattern": None,
                   "rank_pattern": {}, "alpha_pattern": {}, "revision": None}, f, indent=2)

    ids_generator = torch.Generator().manual_seed(SEED + 2)
    input_ids = torch.randint(3, v, (LORA_ROWS, 16), generator=ids_generator)
    position_ids = torch.arange(16).expand_as(input_ids)
    computed = nf4_roundtrip(weights, case["nf4"]) if "nf4" in case else weights
    if "nf4" in case:
        with open(os.path.join(folder, "qlora.json"), "w") as f:
            json.dump(case["nf4"], f)
        import make_bnb_folder  # the same base as bitsandbytes would store it in 4 bits: base-nf4/
        make_bnb_folder.main(os.path.join(folder, "base"), os.path.join(folder, "base-nf4"), case["nf4"]["block_size"],
                             case["nf4"]["double_quant"])
    exact = {n: t.double() for n, t in computed.items()}
    exact.update({n: t.double().requires_grad_(True) for n, t in adapters.items()})
    logits = forward(cfg, exact, input_ids, position_ids, lora_scale=case["alpha"] / case["r"])
    loss = causal_lm_loss(logits, input_ids)  # every token counted: any split of the rows averages alike
    loss.backward()
    tensors = {"input_ids": input_ids.contiguous(), "labels": input_ids.contiguous(),
               "logits": logits.detach().float(), "loss": loss.detach().float().reshape(())}
    tensors.update({"grad." + n: exact[n].grad.float() for n in adapters})
    if "nf4" in case:
        tensors.update({"dequantized." + n: t.contiguous() for n, t in computed.items() if not torch.equal(t, weights[n])})
    write_safetensors(os.path.join(folder, "reference.safetensors"), tensors)
    print(f"{folder}: loss {loss.item():.6f}, {len(adapters)} adapter tensors")


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__.strip().splitlines()[-1])
    out_dir = sys.argv[1]
    for name, case in LORA_CASES.items():
        make_lora(os.path.join(out_dir, name), case)
    for name, cfg in CONFIGS.items():
        # The tied model comes as downloads of Llama 3.2 do: bf16, in shards with an index.
        tied = cfg["tie_word_embeddings"]
        make_one(os.path.join(out_dir, name), cfg, shards=2 if tied else 1, bf16=tied)
    make_one(os.path.join(out_dir, "llama3-gqa-rope-packed"), CONFIGS["llama3-gqa-rope"], packed=True)


if __name__ == "__main__":
    main()
