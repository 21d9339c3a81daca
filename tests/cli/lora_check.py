#!/usr/bin/env python3
"""A LoRA run's outputs against independent references.

  lora_check.py merge BASE PEFT MERGED
      The merged model (shardtune-ckpt merge-lora) computes the logits of the base model with the
      adapter folder applied (shardtune-ckpt export-peft), both evaluated by the plain-PyTorch
      Llama of tests/reference in float64 from the stored weights: relative error below 1e-5.
  lora_check.py merge BASE PEFT MERGED --nf4 BLOCK_SIZE DOUBLE_QUANT [--round bf16|fp16|fp32]
      QLoRA: the same, on the base whose block projections are first quantised to NF4 and
      dequantised by the numpy reference (tests/reference/nf4_reference.py).
  lora_check.py peft BASE PEFT
      Hugging Face peft loads the exported adapter folder onto transformers' Llama, and its
      logits equal the plain-PyTorch reference's of base + adapters (fp32, relative error below
      1e-5). Exits 77 (skipped) where peft or transformers is not installed.
"""
import json
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "reference"))
from llama_torch_reference import forward, nf4_roundtrip, read_folder, read_safetensors  # noqa: E402

SKIPPED = 77


def inputs(vocab):
    generator = torch.Generator().manual_seed(7)
    ids = torch.randint(0, vocab, (3, 24), generator=generator)
    return ids, torch.arange(ids.shape[1]).expand_as(ids)


def config_of(cfg):
    cfg = dict(cfg)
    cfg.setdefault("attention_bias", False)
    cfg.setdefault("mlp_bias", False)
    return cfg


def adapted_logits(base, peft, nf4=None):
    cfg, weights = read_folder(base)
    if nf4 is not None:
        weights = nf4_roundtrip(weights, nf4)
    cfg = config_of(cfg)
    with open(os.path.join(peft, "adapter_config.json")) as f:
        adapter = json.load(f)
    prefix = "base_model.model."
    tensors = read_safetensors(os.path.join(peft, "adapter_model.safetensors"))
    assert all(n.startswith(prefix) for n in tensors), "adapter tensors without PEFT's prefix"
    exact = {n: t.double() for n, t in weights.items()}
    exact.update({n[len(prefix):]: t.double() for n, t in tensors.items()})
    ids, positions = inputs(cfg["vocab_size"])
    scale = adapter["lora_alpha"] / adapter["r"]
    return cfg, ids, forward(cfg, exact, ids, positions, lora_scale=scale), len(tensors)


def relative_error(a, b):
    return ((a.double() - b.double()).abs().max() / b.double().abs().max()).item()


def check_merge(base, peft, merged, nf4=None):
    cfg, ids, want, adapters = adapted_logits(base, peft, nf4)
    merged_cfg, merged_weights = read_folder(merged)
    got = forward(config_of(merged_cfg), {n: t.double() for n, t in merged_weights.items()}, ids,
                  torch.arange(ids.shape[1]).expand_as(ids))
    _, base_weights = read_folder(base)
    base_only = forward(cfg, {n: t.double() for n, t in base_weights.items()}, ids,
                        torch.arange(ids.shape[1]).expand_as(ids))
    err, moved = relative_error(got, want), relative_error(base_only, want)
    print(f"merged vs base + {adapters} adapter tensors: relative error {err:.2e} (the adapters move the logits "
          f"by {moved:.2e})")
    if moved < 1e-3:
        sys.exit("the adapters barely change the logits: the comparison says nothing")
    return 0 if err < 1e-5 else 1


def check_peft(base, peft):
    try:
        from peft import PeftModel
        from transformers import AutoModelForCausalLM
    except ModuleNotFoundError as e:
        if e.name not in ("peft", "transformers"):
            raise  # installed but broken: a failure, not a skip
        print(f"skipped: {e}")
        return SKIPPED
    import transformers
    _, ids, want, _ = adapted_logits(base, peft)
    # transformers 4.56 renamed torch_dtype to dtype (and 5 loads in the file's dtype by default).
    major_minor = tuple(int(x) for x in transformers.__version__.split(".")[:2])
    dtype_key = "dtype" if major_minor >= (4, 56) else "torch_dtype"
    model = AutoModelForCausalLM.from_pretrained(base, **{dtype_key: torch.float32})
    model = PeftModel.from_pretrained(model, peft).eval()
    with torch.no_grad():
        got = model(input_ids=ids).logits
    err = relative_error(got, want)
    print(f"peft {getattr(sys.modules.get('peft'), '__version__', '?')} vs the reference: relative error {err:.2e}")
    return 0 if err < 1e-5 else 1


if __name__ == "__main__":
    mode = sys.argv[1] if len(sys.argv) > 1 else ""
    if mode == "merge" and len(sys.argv) == 5:
        sys.exit(check_merge(*sys.argv[2:]))
    if mode == "merge" and len(sys.argv) in (8, 10) and sys.argv[5] == "--nf4":
        nf4 = dict(block_size=int(sys.argv[6]), double_quant=sys.argv[7] == "true")
        if len(sys.argv) == 10 and sys.argv[8] == "--round":  # the dtype training rounded the base to first
            nf4["round"] = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[sys.argv[9]]
        sys.exit(check_merge(*sys.argv[2:5], nf4=nf4))
    if mode == "peft" and len(sys.argv) == 4:
        sys.exit(check_peft(*sys.argv[2:]))
    sys.exit(__doc__)
