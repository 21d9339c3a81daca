"""The tiny Llama configurations and inputs shared by the reference scripts in this folder.

make_llama_fixtures.py runs them through Hugging Face transformers; llama_torch_reference.py
through its own plain-PyTorch Llama. Both write the same folder layout, which
tests/unit/hf_reference_test.cpp checks shardtune against.
"""
import torch

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
    # Llama-family variants: biases on every projection, linear RoPE scaling.
    "llama-bias-linear": dict(COMMON, num_attention_heads=4, num_key_value_heads=2, rope_theta=10000.0,
                              rope_scaling={"rope_type": "linear", "factor": 4.0}, attention_bias=True,
                              mlp_bias=True, tie_word_embeddings=False),
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


def inputs(vocab_size):
    """Fixed input ids (B, T) and labels with a masked prompt and a masked span (-100)."""
    generator = torch.Generator().manual_seed(SEED + 1)
    input_ids = torch.randint(3, vocab_size, (BATCH, TOKENS), generator=generator)
    labels = input_ids.clone()
    labels[0, :5] = -100  # a masked prompt
    labels[1, 9:11] = -100
    return input_ids, labels


def packed_position_ids():
    """Position ids (B, T) of packed documents: each restart at 0 begins a new document."""
    rows = [[*range(6), *range(10)], [*range(4), *range(9), *range(3)]]
    assert all(len(r) == TOKENS for r in rows) and len(rows) == BATCH
    return torch.tensor(rows, dtype=torch.int64)
