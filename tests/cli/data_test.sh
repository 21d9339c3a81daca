#!/usr/bin/env bash
# The user's data end to end, through `shardtune run`:
#  - the tiny example fine-tunes on its alpaca file (configs/data) and the loss falls;
#  - a tokenizer.model is converted and used;
#  - a bad record stops the job before training with file:line named, or is skipped and counted
#    with on_bad_record = "skip".
# usage: data_test.sh SHARDTUNE SOURCE_DIR
set -u
st=$1 src=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
cd "$src" || exit 1

# A tokenizer.json whose added token has the id 2147483647 (once a crash, SIGSEGV): a named error.
/usr/bin/python3 - configs/data/tiny-tokenizer/tokenizer.json "$tmp/evil.json" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
j["added_tokens"].append({"id": 2147483647, "content": "<evil>", "special": True, "normalized": False})
json.dump(j, open(sys.argv[2], "w"))
PY
echo "hello" >"$tmp/line.txt"
"$(dirname "$st")/shardtune-tokenize" "$tmp/evil.json" "$tmp/line.txt" >/dev/null 2>"$tmp/err"
rc=$?
[ $rc -ne 0 ] && [ $rc -lt 128 ] || fail "a token id of 2147483647 exited $rc"
grep -q 'evil.json: added token "<evil>" has the id 2147483647' "$tmp/err" || fail "the id is not named: $(cat "$tmp/err")"

"$st" run configs/tiny-alpaca.toml -n 2 --set "job.output_dir=$tmp/alpaca" --set train.max_train_step=40 \
  --set checkpoint.every_steps=0 >"$tmp/log" 2>&1 || fail "the alpaca job failed: $(tail -5 "$tmp/log")"
/usr/bin/python3 - "$tmp/alpaca/metrics.jsonl" <<'PY' || fail "the loss did not fall on the alpaca data"
import json, sys
losses = [json.loads(l)["loss"] for l in open(sys.argv[1]) if '"step":' in l]
first, last = sum(losses[:3]) / 3, sum(losses[-3:]) / 3
print(f"alpaca: loss {first:.3f} -> {last:.3f} over {len(losses)} steps")
sys.exit(0 if len(losses) == 40 and last < 0.6 * first else 1)
PY
grep -q "training data: 1900 examples" "$tmp/log" || fail "the split is not 1900 training examples"

# The tokens are cached next to the data: a second job maps them; a changed file is tokenized anew.
cp configs/data/tiny-alpaca.json "$tmp/train.json"
again=(--set "data.train_file=$tmp/train.json" --set train.max_train_step=2)
"$st" run configs/tiny-alpaca.toml -n 2 --set "job.output_dir=$tmp/c1" "${again[@]}" >"$tmp/log" 2>&1 || fail "cache run 1"
grep -q "cached by an earlier run" "$tmp/log" && fail "the first run claims cached tokens"
ls "$tmp"/.train.json.training.*.tokens >/dev/null 2>&1 || fail "no token file next to the data"
"$st" run configs/tiny-alpaca.toml -n 2 --set "job.output_dir=$tmp/c2" "${again[@]}" >"$tmp/log" 2>&1 || fail "cache run 2"
grep -q "training data: 1900 examples, .* (tokens cached by an earlier run)" "$tmp/log" || fail "the second run tokenized again"
# A damaged token file (one byte flipped in its arrays) is named and tokenized anew, not trained on.
tokens=$(ls "$tmp"/.train.json.training.*.tokens)
printf '\x7f' | dd of="$tokens" bs=1 seek=$(($(stat -c %s "$tokens") - 5)) conv=notrunc status=none
"$st" run configs/tiny-alpaca.toml -n 2 --set "job.output_dir=$tmp/c2b" "${again[@]}" >"$tmp/log" 2>&1 || fail "damaged cache run"
grep -q "$tokens is damaged: its checksum does not match" "$tmp/log" && grep -q "tokenizing again" "$tmp/log" ||
  fail "the damaged token file was not named: $(grep -m2 -i 'damaged\|warn' "$tmp/log")"
grep -q "tokens cached by an earlier run" "$tmp/log" && fail "the damaged token file was used"
"$st" run configs/tiny-alpaca.toml -n 2 --set "job.output_dir=$tmp/c2c" "${again[@]}" >"$tmp/log" 2>&1 || fail "cache run after rebuild"
grep -q "(tokens cached by an earlier run)" "$tmp/log" || fail "the rebuilt token file was not used"
/usr/bin/python3 - "$tmp/train.json" <<'PY'
import json, sys
records = json.load(open(sys.argv[1]))
json.dump(records[:1000], open(sys.argv[1], "w"))
PY
"$st" run configs/tiny-alpaca.toml -n 2 --set "job.output_dir=$tmp/c3" "${again[@]}" >"$tmp/log" 2>&1 || fail "cache run 3"
grep -q "training data: 950 examples, [0-9]* tokens ([0-9]* learned, the rest prompt), packed into [0-9]* rows of 128$" "$tmp/log" ||
  fail "a changed data file did not invalidate the cached tokens: $(grep 'training data' "$tmp/log")"

# Padding instead of packing: one example per sample, batches of similar length padded to their
# longest. Batches of one length hold similar tasks, so training losses jump between windows:
# the held-out loss is the measure here.
"$st" run configs/tiny-alpaca.toml -n 2 --set "job.output_dir=$tmp/padding" --set train.max_train_step=60 \
  --set train.batching_strategy=padding --set train.batch_size_training=8 --set checkpoint.every_steps=0 \
  >"$tmp/log" 2>&1 || fail "the padding job failed: $(tail -5 "$tmp/log")"
grep -q "training data: 1900 examples, .* batched by length and padded" "$tmp/log" || fail "not batched by length"
val=$(sed -n 's/.*epoch 1 validation: loss \([0-9.]*\),.*/\1/p' "$tmp/log")
/usr/bin/python3 - "$tmp/padding/metrics.jsonl" "$val" <<'PY' || fail "the held-out loss did not fall with padding"
import json, sys
first = json.loads(open(sys.argv[1]).readline())["loss"]
val = float(sys.argv[2])
print(f"padding: first training loss {first:.3f}, held-out loss after 60 steps {val:.3f}")
sys.exit(0 if val < 0.6 * first else 1)
PY

# A SentencePiece tokenizer.model (Llama 2's format): rank 0 converts it to tokenizer.json under
# the output directory, and the job trains with it.
/usr/bin/python3 - configs/data/tiny-alpaca.json "$tmp/sp-train.txt" <<'PY'
import json, sys
with open(sys.argv[2], "w") as out:
    for r in json.load(open(sys.argv[1])):
        out.write(" ".join(r.values()) + "\n")
PY
"$(dirname "$st")/train_sentencepiece" "$tmp/sp-train.txt" "$tmp/sp" 600 2>"$tmp/sp.log" || fail "cannot train a SentencePiece model: $(tail -2 "$tmp/sp.log")"
"$st" run configs/tiny-alpaca.toml -n 2 --set "job.output_dir=$tmp/sp-run" --set "data.tokenizer=$tmp/sp.model" \
  --set train.max_train_step=4 --set checkpoint.every_steps=0 >"$tmp/log" 2>&1 || fail "the tokenizer.model job failed: $(tail -5 "$tmp/log")"
grep -q "converted the SentencePiece model $tmp/sp.model to $tmp/sp-run/tokenizer/tokenizer.json" "$tmp/log" ||
  fail "tokenizer.model was not converted"

# A broken record at line 3 of a JSON Lines file.
printf '%s\n' '{"prompt": "Say hi.", "response": "hi"}' '{"prompt": "Say yo.", "response": "yo"}' \
  '{"prompt": "broken", "response": ' >"$tmp/bad.jsonl"
for i in $(seq 1 200); do echo "{\"prompt\": \"Say $i.\", \"response\": \"$i\"}"; done >>"$tmp/bad.jsonl"
common=(--set data.format=jsonl --set "data.train_file=$tmp/bad.jsonl" --set train.max_train_step=2
        --set data.tokenizer=configs/data/tiny-tokenizer/tokenizer.json --set train.context_length=32)
if "$st" run configs/tiny-alpaca.toml -n 2 --set "job.output_dir=$tmp/bad" "${common[@]}" >"$tmp/log" 2>&1; then
  fail "a malformed record did not stop the job"
fi
grep -q "bad record at $tmp/bad.jsonl:3: not valid JSON" "$tmp/log" || fail "the error does not name bad.jsonl:3: $(grep -m1 rror "$tmp/log")"
"$st" run configs/tiny-alpaca.toml -n 2 --set "job.output_dir=$tmp/skip" "${common[@]}" --set data.on_bad_record=skip \
  >"$tmp/log" 2>&1 || fail "skip: the job failed: $(tail -3 "$tmp/log")"
grep -q "skipped 1 bad record(s) of 203" "$tmp/log" || fail "skip: the skipped record is not counted"

((failures == 0)) && echo "PASS"
exit $((failures > 0))
