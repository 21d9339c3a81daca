#!/usr/bin/env python3
"""Which scaled_dot_product_attention backend PyTorch picks on this GPU for the benchmark's
attention (Llama 3.2 1B: 32 query heads, 8 key/value heads, head size 64; micro-batch 8, sequence
2048, bf16, causal): as shardtune calls it (key/value heads repeated, cuDNN left out), and with
PyTorch's default flags, repeated and through enable_gqa (transformers' call). Prints one line each;
never fails the call it runs in.  usage: sdpa_choice.py [MICRO_BATCH] [SEQ]
"""
import sys

try:
    import torch
    from torch.nn.attention import SDPBackend

    b = int(sys.argv[1]) if len(sys.argv) > 1 else 8
    t = int(sys.argv[2]) if len(sys.argv) > 2 else 2048
    names = {int(v.value): k for k, v in SDPBackend.__members__.items()}
    opts = dict(dtype=torch.bfloat16, device="cuda")
    q = torch.randn(b, 32, t, 64, **opts)
    kv = torch.randn(b, 8, t, 64, **opts)
    k = kv.repeat_interleave(4, dim=1)

    def choice(key, value, gqa=False):
        return names.get(int(torch._fused_sdp_choice(q, key, value, None, 0.0, True, enable_gqa=gqa)), "?")

    default_cudnn = torch.backends.cuda.cudnn_sdp_enabled()
    torch.backends.cuda.enable_cudnn_sdp(False)
    print(f"sdpa: shardtune's call (heads repeated, cuDNN left out): {choice(k, k)}")
    torch.backends.cuda.enable_cudnn_sdp(default_cudnn)
    print(f"sdpa: PyTorch's defaults (cuDNN {'on' if default_cudnn else 'off'}): heads repeated {choice(k, k)}, "
          f"enable_gqa {choice(kv, kv, True)}")
except Exception as e:  # a fact of the machine, not a check
    print(f"sdpa: could not ask PyTorch: {type(e).__name__}: {e}")
