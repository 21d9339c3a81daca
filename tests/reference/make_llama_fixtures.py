#!/usr/bin/env python3
"""Reference fixtures for shardtune's Llama tests, made by Hugging Face transformers itself.

For each tiny configuration of tiny_llama_configs.py this builds a random LlamaForCausalLM, saves
it with save_pretrained (safetensors), runs one forward and backward pass in fp32 on fixed
inputs, and writes what transformers computed into reference.safetensors beside the model:

    input_ids  I64 (B, T)      labels  I64 (B, T), with -100 entries
    logits     F32 (B, T, V)   loss    F32 ()
    grad.<hf parameter name>   F32, for a few named parameters

plus versions.json (torch, transformers, seed). The C++ test tests/unit/hf_reference_test.cpp
loads each folder with shardtune and compares logits, loss and gradients (relative error < 1e-5).

Needs torch, transformers and safetensors (a GPU is not needed; everything runs on the CPU in
fp32). Usage: python3 tests/reference/make_llama_fixtures.py [OUT_DIR]
(default tests/fixtures/hf). The outputs are small (well under a few MB) and are committed.
"""
import json
import os
import sys

import torch
import transformers
from safetensors.torch import save_file
from transformers import LlamaConfig, LlamaForCausalLM

from tiny_llama_configs import CONFIGS, GRADIENTS, SEED, inputs


def llama_config(kwargs):
    """transformers 5 takes rope_theta and the rope scaling together, as rope_parameters."""
    kwargs = dict(kwargs)
    if hasattr(LlamaConfig(), "rope_parameters"):
        rope = dict(kwargs.pop("rope_scaling", None) or {"rope_type": "default"})
        rope["rope_theta"] = kwargs.pop("rope_theta")
        kwargs["rope_parameters"] = rope
    return LlamaConfig(**kwargs)


def make_one(name, kwargs, out_dir):
    torch.manual_seed(SEED)
    config = llama_config(kwargs)
    config._attn_implementation = "eager"
    model = LlamaForCausalLM(config).float().eval()  # eval: no dropout; gradients still flow
    folder = os.path.join(out_dir, name)
    model.save_pretrained(folder)  # safetensors, the default since transformers 4.35

    input_ids, labels = inputs(config.vocab_size)
    out = model(input_ids=input_ids, labels=labels)
    out.loss.backward()

    tensors = {
        "input_ids": input_ids.contiguous(),
        "labels": labels.contiguous(),
        "logits": out.logits.detach().float().contiguous(),
        "loss": out.loss.detach().float().reshape(()),
    }
    params = dict(model.named_parameters())
    for pname in GRADIENTS:
        if pname == "lm_head.weight" and config.tie_word_embeddings:
            continue  # tied: the gradient is embed_tokens'
        tensors["grad." + pname] = params[pname].grad.detach().float().contiguous()
    save_file(tensors, os.path.join(folder, "reference.safetensors"))
    with open(os.path.join(folder, "versions.json"), "w") as f:
        json.dump({"torch": torch.__version__, "transformers": transformers.__version__, "seed": SEED}, f,
                  indent=2)
    print(f"{folder}: loss {out.loss.item():.6f}")


def main():
    out_dir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "..",
                                                                  "tests", "fixtures", "hf")
    torch.use_deterministic_algorithms(True)
    for name, kwargs in CONFIGS.items():
        make_one(name, kwargs, out_dir)


if __name__ == "__main__":
    main()
