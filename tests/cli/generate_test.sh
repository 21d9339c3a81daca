#!/usr/bin/env bash
# `shardtune generate` end to end:
#  - the chat demo: configs/tiny-chat.toml trains, and generate, given each training question as a
#    chat turn, answers with the training answer (greedy), stopping at <|eot_id|>, each answer token
#    ahead of the next likeliest by at least 2 logits. The margin covers other machines: trained
#    under OpenBLAS's Haswell/Zen, Sandybridge and Nehalem kernels and with seeds 1 to 3, the
#    smallest margin of any answer token was 6.8 to 7.7 (at 10 epochs, Nehalem's was 1.1, and
#    one EPYC machine's run answered one question wrongly);
#  - one model, every source: the job's output folder, its 2-rank sharded checkpoint, that
#    checkpoint consolidated into a full one, and its Hugging Face export give bitwise the same
#    logits (world size 1 reads any world size's checkpoint);
#  - LoRA and QLoRA checkpoints with their base: the logits of merge-lora's merged folder within
#    1e-4 of the largest (the adapters kept apart instead of merged in; QLoRA's base as NF4 values);
#  - DPO from the chat demo (configs/tiny-dpo.toml, precomputed reference): on held-out pairs the
#    reward margin grows from epoch to epoch and the accuracy ends above 0.9, and the model answers
#    at least 90% of their prompts (a system prompt no training pair has) with the chosen answer;
#  - sampling with a seed is reproducible, and another seed draws otherwise;
#  - `shardtune generate` is shardtune-generate; bad input (no folder, no prompt, a base of
#    another model or with other bytes, ids that are not numbers) is refused by name; a chat for a
#    tokenizer without a template names --chat-format; --system with a plain prompt is noted.
# usage: generate_test.sh SHARDTUNE SOURCE_DIR SHARDTUNE_CKPT
set -u
st=$1 src=$2 ckpt=$3
gen=$(dirname "$st")/shardtune-generate
py=/usr/bin/python3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
cd "$src" || exit 1

# --- The chat demo ---------------------------------------------------------------------------------
"$st" run configs/tiny-chat.toml -n 2 --set "job.output_dir=$tmp/chat" --set train.run_validation=false \
  --set checkpoint.every_steps=0 >"$tmp/log" 2>&1 || { fail "tiny-chat failed"; tail -5 "$tmp/log"; }
$py - "$gen" "$tmp/chat" configs/data/tiny-chat.jsonl <<'PY' || fail "the chat demo does not answer its questions"
import json, subprocess, sys
gen, run, data = sys.argv[1:]
pairs = {}
for line in open(data):
    m = json.loads(line)["messages"]
    for q, a in zip(m, m[1:]):
        if q["role"] == "user" and a["role"] == "assistant":
            pairs[q["content"]] = a["content"]
right, worst = 0, float("inf")
for question, answer in sorted(pairs.items()):
    r = subprocess.run([gen, run, "--chat", question, "--max-new-tokens", "24", "--json", "--json-logits"],
                       capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"generate failed: {r.stderr}")
    out = json.loads(r.stdout)
    # Each answer token's logit minus the largest of the others, at its step.
    margin = min(l[t] - max(v for i, v in enumerate(l) if i != t) for t, l in zip(out["tokens"], out["logits"]))
    worst = min(worst, margin)
    ok = out["stopped"] and out["text"] == answer and margin >= 2.0
    right += ok
    print(f"{'ok ' if ok else 'BAD'} {question!r} -> {out['text']!r} (margin {margin:.2f})")
print(f"{right} of {len(pairs)} questions answered with their training answer; smallest margin {worst:.2f}")
sys.exit(0 if right == len(pairs) else 1)
PY

# --- One model, every source -----------------------------------------------------------------------
json_of() { "$gen" "$@" --ids 1,40,41,42 --max-new-tokens 8 --json --json-logits 2>>"$tmp/gen.err"; }
step=$tmp/chat/checkpoints/step-0000900
"$ckpt" consolidate "$step" "$tmp/full900" >/dev/null 2>&1 || fail "consolidate failed"
"$ckpt" export-hf "$step" "$tmp/hf900" >/dev/null 2>&1 || fail "export-hf failed"
job=$(json_of "$tmp/chat") || fail "generate from the job folder: $(tail -2 "$tmp/gen.err")"
a=$(json_of "$step") || fail "generate from a sharded checkpoint"
b=$(json_of "$tmp/full900") || fail "generate from a full checkpoint"
c=$(json_of "$tmp/hf900" --tokenizer configs/data/tiny-chat-tokenizer/tokenizer.json) || fail "generate from an HF folder"
[[ -n "$a" && "$a" == "$b" && "$a" == "$c" && "$a" == "$job" ]] ||
  fail "the job folder, its sharded and full checkpoints and their HF export differ"
grep -q "loaded checkpoint .*step-0000900 (step 900, saved by 2 rank(s))" "$tmp/gen.err" || fail "the source is not named"
grep -q "loaded checkpoint .*full900 (step 900, saved by [0-9]* rank(s))" "$tmp/gen.err" || fail "the full checkpoint is not named"

# --- DPO from the chat demo (configs/tiny-dpo.toml) -------------------------------------------------
# On held-out pairs (a system prompt no training pair has), the reward margin grows from epoch to
# epoch and its accuracy ends above 0.9; the model answers those prompts with the chosen answers.
$py - "$tmp/heldout.jsonl" <<'PY'
import json, sys
seen = {}  # question -> its pairs' chosen answer and up to four of their rejected ones
for line in open("configs/data/tiny-preference.jsonl"):
    r = json.loads(line)
    chosen, rejected = seen.setdefault(r["prompt"][-1]["content"], (r["chosen"], []))
    if r["rejected"] not in rejected and len(rejected) < 4:
        rejected.append(r["rejected"])
with open(sys.argv[1], "w") as f:
    for question, (chosen, rejected) in sorted(seen.items()):
        for wrong in rejected:
            f.write(json.dumps({"prompt": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": question}],
                                "chosen": chosen, "rejected": wrong}) + "\n")
PY
"$st" run configs/tiny-dpo.toml -n 2 --set "job.output_dir=$tmp/dpo" --set "model.path=$tmp/hf900" \
  --set "data.val_file=$tmp/heldout.jsonl" --set checkpoint.every_steps=0 >"$tmp/dpo.log" 2>&1 ||
  fail "tiny-dpo failed: $(tail -3 "$tmp/dpo.log")"
$py - "$gen" "$tmp/dpo" "$tmp/heldout.jsonl" <<'PY' || fail "DPO from the chat demo did not raise the held-out margin or answer as chosen"
import json, subprocess, sys
gen, run, heldout = sys.argv[1:]
evals = [json.loads(l) for l in open(run + "/metrics.jsonl") if '"val_loss"' in l]
margins = [e["val_rewards/margins"] for e in evals]
print(f"held-out margins by epoch {margins}, accuracy {evals[-1]['val_rewards/accuracies']}")
assert len(evals) == 2 and 0 < margins[0] < margins[1] and evals[-1]["val_rewards/accuracies"] > 0.9
right = 0
pairs = list({p["prompt"][1]["content"]: p for p in map(json.loads, open(heldout))}.values())  # a prompt once
for p in pairs:
    r = subprocess.run([gen, run, "--system", p["prompt"][0]["content"], "--chat", p["prompt"][1]["content"],
                        "--max-new-tokens", "24", "--json"], capture_output=True, text=True)
    text = json.loads(r.stdout)["text"] if r.returncode == 0 else r.stderr
    right += text == p["chosen"]
    print(f"{'ok ' if text == p['chosen'] else 'BAD'} {p['prompt'][1]['content']!r} -> {text!r}")
print(f"{right} of {len(pairs)} held-out prompts answered with the chosen answer")
assert right >= 0.9 * len(pairs)
PY

# --- LoRA and QLoRA: adapters on their base, against the merged model ------------------------------
for method in lora qlora; do
  "$st" run configs/tiny-$method.toml -n 2 --set "job.output_dir=$tmp/$method" --set train.max_train_step=10 \
    --set train.run_validation=false --set checkpoint.every_steps=0 >"$tmp/log" 2>&1 || fail "tiny-$method failed"
  step=$tmp/$method/checkpoints/step-0000010
  "$ckpt" merge-lora "$step" configs/data/tiny-llama "$tmp/$method-merged" >/dev/null 2>&1 || fail "$method: merge-lora"
  json_of "$step" >"$tmp/$method.json" || fail "$method: generate from the adapter checkpoint: $(tail -2 "$tmp/gen.err")"
  json_of "$tmp/$method-merged" >"$tmp/$method-merged.json" || fail "$method: generate from the merged folder"
  $py - "$tmp/$method.json" "$tmp/$method-merged.json" <<'PY' || fail "$method: the adapter checkpoint and the merged model generate differently"
import json, sys
x, y = (json.load(open(a)) for a in sys.argv[1:])
scale = max(abs(v) for v in y["logits"][0])
err = max(abs(p - q) for p, q in zip(x["logits"][0], y["logits"][0])) / scale
print(f"first-step logits: {err:.2e} of the largest apart")
sys.exit(0 if err < 1e-4 else 1)
PY
done
grep -q "QLoRA adapters (r = 8) on .*configs/data/tiny-llama" "$tmp/gen.err" || fail "the QLoRA source is not named"
"$gen" "$tmp/lora/checkpoints/step-0000010" --base configs/data/tiny-chat-tokenizer --ids 1 >/dev/null 2>"$tmp/err" &&
  fail "a base that is not a model was taken"
"$gen" "$tmp/qlora/checkpoints/step-0000010" --base "$tmp/hf900" --ids 1 >/dev/null 2>"$tmp/err" &&
  fail "another model was taken as the base"
grep -q "is not the base model the adapters of .* were trained on" "$tmp/err" || fail "a wrong base: $(cat "$tmp/err")"
# The base with one byte changed past the first 64 bytes of every tensor (its last weight's last
# byte): generate compares every byte, as merge-lora and a resume do.
cp -r configs/data/tiny-llama "$tmp/altered"
$py - "$tmp/altered" <<'PY'
import glob, os, sys
f = sorted(glob.glob(os.path.join(sys.argv[1], "*.safetensors")))[-1]
with open(f, "r+b") as h:
    h.seek(-1, os.SEEK_END)
    b = h.read(1)
    h.seek(-1, os.SEEK_END)
    h.write(bytes([b[0] ^ 0x40]))
PY
"$gen" "$tmp/lora/checkpoints/step-0000010" --base "$tmp/altered" --ids 1 >/dev/null 2>"$tmp/err" &&
  fail "a base with other weights (past their first bytes) was taken"
grep -q "weights SHA-256 (every byte)" "$tmp/err" || fail "an altered base: $(cat "$tmp/err")"

# --- Sampling, the launcher's subcommand, bad input ------------------------------------------------
# (At a high temperature: the trained model is sure enough of itself to draw one answer at T = 1.)
sample() { "$st" generate "$tmp/chat" --prompt "What" --temperature 3.0 --top-k 400 --top-p 0.99 --max-new-tokens 24 --json "$@" 2>/dev/null; }
s1=$(sample --seed 3) s2=$(sample --seed 3) s3=$(sample --seed 4)
[[ -n "$s1" && "$s1" == "$s2" ]] || fail "the same seed drew differently: $s1 | $s2"
[[ "$s1" != "$s3" ]] || fail "another seed drew the same: $s1"
"$gen" "$tmp/nowhere" --prompt x >/dev/null 2>"$tmp/err" && fail "a missing folder was accepted"
grep -q "$tmp/nowhere is not a folder" "$tmp/err" || fail "the missing folder is not named: $(cat "$tmp/err")"
"$gen" "$tmp/chat" --ids "1,2x,3" >/dev/null 2>"$tmp/err" && fail "--ids 1,2x,3 was accepted"
grep -q -- '--ids: "2x" is not a token id' "$tmp/err" || fail "a bad --ids item is not named: $(cat "$tmp/err")"
"$gen" "$tmp/chat" >/dev/null 2>"$tmp/err" && fail "no prompt was accepted"
grep -q "give --prompt, --chat, --ids or --interactive" "$tmp/err" || fail "no prompt: $(cat "$tmp/err")"
# A chat turn for a model whose tokenizer has no chat template: the hint names the command's option.
"$gen" configs/data/tiny-llama --chat "hi" --max-new-tokens 1 >/dev/null 2>"$tmp/err" && fail "a chat without a format was taken"
grep -q "Here: give --chat-format llama3, llama3.1 or llama2" "$tmp/err" || fail "the hint does not name --chat-format: $(cat "$tmp/err")"
# --system and --chat-format do not shape a plain prompt: said once.
"$gen" "$tmp/chat" --prompt "What" --system "Be brief." --max-new-tokens 1 >/dev/null 2>"$tmp/err" || fail "a plain prompt failed"
grep -q "note: --system and --chat-format shape --chat and --interactive only; the prompt of --prompt is used as given" \
  "$tmp/err" || fail "no note that --system does not shape --prompt: $(cat "$tmp/err")"
echo "What color is the sky?" | "$st" generate "$tmp/chat" --interactive >"$tmp/chat.out" 2>"$tmp/err" ||
  fail "interactive: $(cat "$tmp/err")"
grep -qx "The sky is blue." "$tmp/chat.out" || fail "interactive chat: $(cat "$tmp/chat.out")"
grep -q "new token(s) (stopped at an end token): the [0-9]*-token prompt in [0-9.]* s, then [0-9.]* tokens/s" "$tmp/err" ||
  fail "no rate reported: $(cat "$tmp/err")"

((failures == 0)) && echo "PASS"
exit $((failures > 0))
