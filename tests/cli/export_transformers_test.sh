#!/usr/bin/env bash
# export-hf writes folders that Hugging Face transformers loads: from_pretrained finds every
# weight (nothing missing, unexpected or mismatched), the weights equal those transformers reads
# from the folder the checkpoint was imported from, and so do the logits (bf16 -> f32 -> bf16/f32
# is exact). Needs python3 with torch and transformers (the GPU machine has them); skipped (77)
# elsewhere.
# usage: export_transformers_test.sh SHARDTUNE_CKPT SHARDTUNE_MAKE_MODEL
set -u
ckpt=$1 make_model=$2
# Python runs with its own libraries, not those on the programs' library path (scripts/gpu-env.sh).
py() { env -u LD_LIBRARY_PATH python3 "$@"; }
if ! err=$(py -c "import torch, transformers" 2>&1); then
  grep -q ModuleNotFoundError <<<"$err" && { echo "SKIP: python3 lacks torch or transformers"; exit 77; }
  echo "$err"
  exit 1
fi
tmp=$(mktemp -d /var/tmp/shardtune-export-tf.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
set -e
"$make_model" "$tmp/hf" --layers 2 --dtype bf16 >/dev/null
"$ckpt" import-hf "$tmp/hf" "$tmp/full" 2>/dev/null
"$ckpt" export-hf "$tmp/full" "$tmp/fp32" --dtype fp32 --max-shard-bytes 100000 2>/dev/null  # several shards + index
"$ckpt" export-hf "$tmp/full" "$tmp/bf16" --dtype bf16 2>/dev/null
set +e
py - "$tmp" <<'PY'
import json, sys, torch
from transformers import LlamaForCausalLM
tmp = sys.argv[1]
torch.manual_seed(0)
original = LlamaForCausalLM.from_pretrained(f"{tmp}/hf", torch_dtype=torch.float32).eval()
reference = original.state_dict()
ids = torch.randint(0, original.config.vocab_size, (2, 12))
with torch.no_grad():
    want = original(ids).logits
for folder, dtype, name in (("fp32", torch.float32, "float32"), ("bf16", torch.bfloat16, "bfloat16")):
    assert json.load(open(f"{tmp}/{folder}/config.json"))["torch_dtype"] == name, folder
    model, info = LlamaForCausalLM.from_pretrained(f"{tmp}/{folder}", torch_dtype=dtype, output_loading_info=True)
    assert not any(info.values()), (folder, info)
    loaded = model.state_dict()
    assert loaded.keys() == reference.keys(), (folder, set(loaded) ^ set(reference))
    for key, t in loaded.items():
        assert t.dtype == dtype and torch.equal(t.float(), reference[key]), (folder, key)
    with torch.no_grad():
        got = model.float().eval()(ids).logits
    assert torch.equal(got, want), (folder, (got - want).abs().max().item())
    print(f"{folder}: transformers loaded {len(loaded)} tensors equal to the original folder's; logits equal")
PY
