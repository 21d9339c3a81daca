#!/usr/bin/env bash
# export-gguf embeds the chat format a checkpoint was trained in, not whatever its tokenizer folder
# holds: tiny-chat (whose tokenizer folder has Llama 3.1's template) trained one step in each of
# llama3, llama3.1 and llama2, exported to GGUF; the template in each file, rendered by
# python3-jinja2 as transformers renders templates (tests/tokenizer/chat_render.py), gives exactly
# the text `shardtune-tokenize --chat FORMAT` (the trainer's rendering) gives, for the chat fixtures,
# with and without a generation prompt. llama3.1 keeps the folder's own (Meta's) template; the two
# others get shardtune's, and the export says so.
# usage: gguf_chat_template_test.sh SHARDTUNE SHARDTUNE_CKPT SHARDTUNE_TOKENIZE SOURCE_DIR
set -u
st=$1 ckpt=$2 tok=$3 src=$4
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
cd "$src" || exit 1
py=/usr/bin/python3
tokdir=configs/data/tiny-chat-tokenizer
data=tests/fixtures/chat/conversations.jsonl
read -r bos eos < <($py -c 'import json, sys; c = json.load(open(sys.argv[1])); print(c["bos_token"], c["eos_token"])' \
  "$tokdir/tokenizer_config.json")

for format in llama3 llama3.1 llama2; do
  out=$tmp/$format
  "$st" run configs/tiny-chat.toml -n 1 --set "job.output_dir=$out" --set train.max_train_step=1 \
    --set train.run_validation=false --set "data.chat_format=$format" >"$out.log" 2>&1 ||
    { fail "$format: training failed: $(tail -3 "$out.log")"; continue; }
  "$ckpt" export-gguf "$out/checkpoints/step-0000001" "$out.gguf" --dtype f32 >"$out.export" 2>&1 ||
    { fail "$format: export-gguf failed: $(tail -3 "$out.export")"; continue; }
  if [ "$format" = llama3.1 ]; then
    grep -q "the file gets shardtune's" "$out.export" && fail "llama3.1: the folder's own template was replaced"
  else
    grep -q "the job trained in the $format chat format, which the template beside .* is not; the file gets shardtune's $format template" \
      "$out.export" || fail "$format: the export does not say which template it embeds: $(cat "$out.export")"
  fi
  $py - "$out.gguf" "$out.template" <<'PY' || { fail "$format: no chat template in the GGUF file"; continue; }
import struct, sys
f = open(sys.argv[1], "rb")
assert f.read(4) == b"GGUF"
version, tensors, kvs = struct.unpack("<IQQ", f.read(20))
def string():
    (n,) = struct.unpack("<Q", f.read(8))
    return f.read(n).decode()
sizes = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
def skip(kind):
    if kind == 8:
        string()
    elif kind == 9:
        inner, n = struct.unpack("<IQ", f.read(12))
        for _ in range(n):
            skip(inner)
    else:
        f.read(sizes[kind])
for _ in range(kvs):
    key, (kind,) = string(), struct.unpack("<I", f.read(4))
    if key == "tokenizer.chat_template":
        open(sys.argv[2], "w").write(string())
        sys.exit(0)
    skip(kind)
sys.exit(1)
PY
  for gen in "" --generation-prompt; do
    name="$format${gen:+ with a generation prompt}"
    rm -rf "$out.render"
    $py tests/tokenizer/chat_render.py "$out.template" "$bos" "$eos" "$data" "$out.render" $gen >/dev/null 2>"$out.err" ||
      { fail "$name: Jinja could not render the embedded template: $(tail -3 "$out.err")"; continue; }
    "$tok" "$tokdir/tokenizer.json" "$data" --chat "$format" $gen >"$out.ours" 2>"$out.err" ||
      { fail "$name: shardtune-tokenize failed: $(cat "$out.err")"; continue; }
    $py - "$out.render/texts.jsonl" "$out.ours" <<'PY' || fail "$name: the embedded template renders otherwise than training"
import json, sys
theirs = [json.loads(l) for l in open(sys.argv[1])]
ours = [json.loads(l)["text"] for l in open(sys.argv[2])]
assert len(theirs) == len(ours) > 0, (len(theirs), len(ours))
for i, (a, b) in enumerate(zip(theirs, ours)):
    assert a == b, f"conversation {i + 1}:\n{a!r}\n{b!r}"
print(f"{len(ours)} conversations rendered alike")
PY
  done
done

((failures == 0)) && echo "PASS"
exit $((failures > 0))
