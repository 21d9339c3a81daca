#!/usr/bin/env python3
"""Reference fixtures for shardtune's Llama tests, made by Hugging Face transformers itself.

For each tiny configuration below this builds a random LlamaForCausalLM, saves it with
save_pretrained (safetensors), runs one forward and backward pass in fp32 on fixed inputs, and
writes what transformers computed into reference.safetensors beside the model:

    input_ids  I64 (B, T)      labels  I64 (B, T), with -100 entries
    logits     F32 (B, T, V)   loss    F32 ()
    grad.<hf parameter name>   F32, for a few named parameters

plus versions.json (torch, transformers, seed). The C++ test tests/unit/hf_reference_test.cpp
loads each folder with shardtune and compares logits, loss and gradients (relative error < 1e-5).

Needs torch, transformers and safetensors (a GPU is not needed; everything runs on the CPU in
fp32). Usage: python3 tools/reference/make_llama_fixtures.py [OUT_DIR]
(default tests/fixtures/hf). The outputs are small (well under a few MB) and are committed.
"""
import json
import os
import sys

import torch
import transformers
from safetensors.torch import save_file
from transformers import LlamaConfig, LlamaForCausalLM

SEED = 1234
BATCH, TOKENS = 2, 16

COMMON = dict(
    vocab_size=1024,
    hidden_size=64,
    intermediate_size=176,
    num_hidden_layers=2,
    max_position_embeddings=256,
    rms_norm_eps=1e-5,
    initializer_range=0.02,
    bos_token_id=1,
    eos_token_id=2,
    attention_bias=False,
    mlp_bias=False,
)

CONFIGS = {
    # Llama 2: multi-head attention, no RoPE scaling, untied head.
    "llama2-mha": dict(COMMON, num_attention_heads=4, num_key_value_heads=4, rope_theta=10000.0,
                       rope_scaling=None, tie_word_embeddings=False),
    # Llama 3.1: grouped-query attention, llama3 RoPE scaling (scaled band inside the short context).
    "llama3-gqa-rope": dict(COMMON, num_attention_heads=8, num_key_value_heads=2, rope_theta=500000.0,
                            rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                          "high_freq_factor": 4.0, "original_max_position_embeddings": 64},
                            tie_word_embeddings=False),
    # Llama 3.2 1B/3B: tied input and output embeddings, explicit head_dim.
    "llama32-tied": dict(COMMON, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                         rope_theta=500000.0,
                         rope_scaling={"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0,
                                       "high_freq_factor": 4.0, "original_max_position_embeddings": 64},
                         tie_word_embeddings=True),
}

GRADIENTS = [
    "model.embed_tokens.weight",
    "model.layers.0.self_attn.q_proj.weight",
    "model.layers.0.self_attn.k_proj.weight",
    "model.layers.1.mlp.down_proj.weight",
    "model.layers.1.input_layernorm.weight",
    "model.norm.weight",
    "lm_head.weight",
]


def make_one(name, kwargs, out_dir):
    torch.manual_seed(SEED)
    config = LlamaConfig(**kwargs)
    config._attn_implementation = "eager"
    model = LlamaForCausalLM(config).float().eval()  # eval: no dropout; gradients still flow
    folder = os.path.join(out_dir, name)
    model.save_pretrained(folder, safe_serialization=True)

    generator = torch.Generator().manual_seed(SEED + 1)
    input_ids = torch.randint(3, config.vocab_size, (BATCH, TOKENS), generator=generator)
    labels = input_ids.clone()
    labels[0, :5] = -100  # a masked prompt
    labels[1, 9:11] = -100
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
