#!/usr/bin/env bash
# The user's data end to end, through `shardtune run`:
#  - the tiny example fine-tunes on its alpaca file (configs/data) and the loss falls; the tiny
#    chat example's conversations are rendered in Llama 3.1's format, the loss on the assistant's;
#  - a tokenizer.model is converted and used;
#  - a bad record stops the job before training with file:line named, or is skipped and counted
#    with on_bad_record = "skip"; the token cache never carries a run's policy over to another, and
#    says what it skipped when it is used;
#  - a jsonl prompt_template names the fields a record needs (prompt_field is not), and a record
#    lacking one is a bad record like any other, reported before any weight is read;
#  - token files of other settings that no job used for a day are removed, the newest kept;
#  - validation: rows without a learned token never make it NaN, and a validation set that would
#    evaluate nothing is an error before training, naming where its records come from.
# usage: data_test.sh SHARDTUNE SOURCE_DIR
set -u
st=$1 src=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
cd "$src" || exit 1
# Runs start 2 ranks where ranks share the work or must stop together (the first tokenization and
# its cache, a damaged cache rebuilt, the SentencePiece conversion, batches by length, a bad record
# and a missing field stopping the job); 1 where the data alone is the point.

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
"$st" run configs/tiny-alpaca.toml -n 1 --set "job.output_dir=$tmp/c2" "${again[@]}" >"$tmp/log" 2>&1 || fail "cache run 2"
grep -q "training data: 1900 examples, .* (tokens cached by an earlier run)" "$tmp/log" || fail "the second run tokenized again"
# A damaged token file (one byte flipped in its arrays) is named and tokenized anew, not trained on.
tokens=$(ls "$tmp"/.train.json.training.*.tokens)
printf '\x7f' | dd of="$tokens" bs=1 seek=$(($(stat -c %s "$tokens") - 5)) conv=notrunc status=none
"$st" run configs/tiny-alpaca.toml -n 2 --set "job.output_dir=$tmp/c2b" "${again[@]}" >"$tmp/log" 2>&1 || fail "damaged cache run"
grep -q "$tokens is damaged: its checksum does not match" "$tmp/log" && grep -q "tokenizing again" "$tmp/log" ||
  fail "the damaged token file was not named: $(grep -m2 -i 'damaged\|warn' "$tmp/log")"
grep -q "tokens cached by an earlier run" "$tmp/log" && fail "the damaged token file was used"
"$st" run configs/tiny-alpaca.toml -n 1 --set "job.output_dir=$tmp/c2c" "${again[@]}" >"$tmp/log" 2>&1 || fail "cache run after rebuild"
grep -q "(tokens cached by an earlier run)" "$tmp/log" || fail "the rebuilt token file was not used"
/usr/bin/python3 - "$tmp/train.json" <<'PY'
import json, sys
records = json.load(open(sys.argv[1]))
json.dump(records[:1000], open(sys.argv[1], "w"))
PY
"$st" run configs/tiny-alpaca.toml -n 1 --set "job.output_dir=$tmp/c3" "${again[@]}" >"$tmp/log" 2>&1 || fail "cache run 3"
grep -q "training data: 950 examples, [0-9]* tokens ([0-9]* learned, the rest prompt), packed into [0-9]* rows of 128$" "$tmp/log" ||
  fail "a changed data file did not invalidate the cached tokens: $(grep 'training data' "$tmp/log")"

# Padding instead of packing: one example per sample, batches of similar length padded to their
# longest. Batches of one length hold similar tasks, so training losses jump between windows:
# the held-out loss is the measure here. An untrained model's loss is about ln(vocabulary), 6.3; the
# held-out loss, a mean over every learned token of the set, must have fallen below 70% of it.
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
sys.exit(0 if val < 0.7 * first else 1)
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
"$st" run configs/tiny-alpaca.toml -n 1 --set "job.output_dir=$tmp/skip" "${common[@]}" --set data.on_bad_record=skip \
  >"$tmp/log" 2>&1 || fail "skip: the job failed: $(tail -3 "$tmp/log")"
grep -q "skipped 1 bad record(s) of 203" "$tmp/log" || fail "skip: the skipped record is not counted"

# The token cache's key includes on_bad_record: after the skip run, the same data with "error" is
# read again and refused, and the skip run's count comes back with its cached tokens.
if "$st" run configs/tiny-alpaca.toml -n 1 --set "job.output_dir=$tmp/bad2" "${common[@]}" >"$tmp/log" 2>&1; then
  fail "after a skip run, on_bad_record = \"error\" trained from the skip run's cached tokens"
fi
grep -q "bad record at $tmp/bad.jsonl:3" "$tmp/log" || fail "error after skip: $(grep -m1 rror "$tmp/log")"
"$st" run configs/tiny-alpaca.toml -n 1 --set "job.output_dir=$tmp/skip2" "${common[@]}" --set data.on_bad_record=skip \
  >"$tmp/log" 2>&1 || fail "skip again: the job failed: $(tail -3 "$tmp/log")"
grep -q "from the token cache: $tmp/bad.jsonl: skipped 1 bad record(s) of 203" "$tmp/log" ||
  fail "the cached tokens lost their skip count: $(grep -m2 'token cache\|skipped' "$tmp/log")"

# The README's template: jsonl records {question, response}, no prompt_field. A record without
# {question} is a bad record (skipped and counted, or an error naming its line before the model).
for i in $(seq 1 120); do echo "{\"question\": \"What is $i plus 1?\", \"response\": \"$((i + 1))\"}"; done >"$tmp/qa.jsonl"
echo '{"query": "no question here", "response": "x"}' >>"$tmp/qa.jsonl"
qa=(--set data.format=jsonl --set "data.train_file=$tmp/qa.jsonl" --set data.val_fraction=0.1
    --set 'data.prompt_template="Question: {question}\nAnswer: "' --set train.context_length=32
    --set data.tokenizer=configs/data/tiny-tokenizer/tokenizer.json --set train.max_train_step=2)
"$st" run configs/tiny-alpaca.toml -n 1 --set "job.output_dir=$tmp/qa" "${qa[@]}" --set data.on_bad_record=skip \
  >"$tmp/log" 2>&1 || fail "the README's prompt template did not train: $(grep -m2 -i error "$tmp/log")"
grep -q "skipped 1 bad record(s) of 121; first: $tmp/qa.jsonl:121: no field \"question\"" "$tmp/log" ||
  fail "a record without the template's field was not skipped: $(grep -m1 skipped "$tmp/log")"
if "$st" run configs/tiny-alpaca.toml -n 2 --set "job.output_dir=$tmp/qa-error" "${qa[@]}" >"$tmp/log" 2>&1; then
  fail "a record without the template's field did not stop the job"
fi
grep -q "bad record at $tmp/qa.jsonl:121: no field \"question\"" "$tmp/log" || fail "qa error: $(grep -m1 rror "$tmp/log")"
grep -q "model: " "$tmp/log" && fail "the model was built before the data error"

# Token files of other keys beside the data, unused for two days: the newest two stay beside the
# one in use; those used within the day (the runs above) are not touched.
for k in 1 2 3 4; do
  f=$(printf '%s/.train.json.training.%016x.tokens' "$tmp" "$k")
  echo "a token file of other settings" >"$f"
  touch -d '2 days ago' "$f"
done
"$st" run configs/tiny-alpaca.toml -n 1 --set "job.output_dir=$tmp/clean" "${again[@]}" >"$tmp/log" 2>&1 || fail "cleanup run"
left=$(ls "$tmp"/.train.json.training.000000000000000[1-4].tokens 2>/dev/null | wc -l)
[[ $left -eq 2 ]] || fail "$left of 4 stale token files left, not 2"
[[ $(grep -c "removed the token file" "$tmp/log") -eq 2 ]] || fail "the removals were not logged: $(grep -c removed "$tmp/log")"

# Validation rows: a record longer than the context splits into rows, one of them prompt only; that
# row is left out, and the loss stays finite.
/usr/bin/python3 - "$tmp/long-val.json" <<'PY'
import json, sys
words = " ".join(f"word{i}" for i in range(40))
json.dump([{"instruction": f"Repeat these words: {words}", "input": "", "output": "ok"}] * 3, open(sys.argv[1], "w"))
PY
"$st" run configs/tiny-alpaca.toml -n 1 --set "job.output_dir=$tmp/long" --set "data.val_file=$tmp/long-val.json" \
  --set train.context_length=64 --set train.max_train_step=2 --set train.num_epochs=1 >"$tmp/log" 2>&1 ||
  fail "long validation records: $(tail -3 "$tmp/log")"
/usr/bin/python3 - "$tmp/long/metrics.jsonl" <<'PY' || fail "validation is not finite with prompt-only rows"
import json, math, sys
evals = [json.loads(l) for l in open(sys.argv[1]) if '"val_loss"' in l]
steps = [json.loads(l) for l in open(sys.argv[1]) if '"step":' in l]
ok = evals and all(isinstance(e["val_loss"], float) and math.isfinite(e["val_loss"]) for e in evals)
ok = ok and all(isinstance(s["loss"], float) and math.isfinite(s["loss"]) for s in steps)
print("long rows:", [e["val_loss"] for e in evals], [e["val_rows"] for e in evals])
sys.exit(0 if ok else 1)
PY
grep -q "validation data: .*row(s) left out, they hold only prompt tokens" "$tmp/log" || fail "no prompt-only row was left out"

# Chat data (configs/tiny-chat.toml): rendered in the Llama 3.1 format its tokenizer's template is,
# the loss on the assistant turns (that it learns them, generate_test.sh shows); train_on = "all"
# learns every token but each conversation's opening BOS (packed after another example, it would be
# learned as what follows that example's end); a bad conversation stops the job naming its line and turn.
"$st" run configs/tiny-chat.toml -n 2 --set "job.output_dir=$tmp/chat" --set train.max_train_step=2 \
  --set checkpoint.every_steps=0 --set train.run_validation=false >"$tmp/log" 2>&1 ||
  fail "the chat job failed: $(tail -5 "$tmp/log")"
grep -q 'chat data: rendered as llama3.1 (the chat template of .*configs/data/tiny-chat-tokenizer/tokenizer_config.json (Llama 3.1/3.3 Instruct.s)); the loss on the assistant.s turns' "$tmp/log" ||
  fail "the chat format is not reported: $(grep -m2 -i 'chat\|error' "$tmp/log")"
learned=$(sed -n 's/.*training data: 800 examples, \([0-9]*\) tokens (\([0-9]*\) learned.*/\1 \2/p' "$tmp/log")
read -r all_tokens learned_tokens <<<"$learned"
[[ -n "$learned" ]] && ((learned_tokens > 0 && 3 * learned_tokens < all_tokens)) ||
  fail "chat: the assistant turns are not a small share of the tokens: '$learned'"
"$st" run configs/tiny-chat.toml -n 1 --set "job.output_dir=$tmp/chat-all" --set train.max_train_step=1 \
  --set data.train_on=all --set train.run_validation=false >"$tmp/log" 2>&1 || fail "train_on = all failed"
grep -q "training data: 800 examples, $all_tokens tokens ($((all_tokens - 800)) learned" "$tmp/log" ||
  fail "train_on = all does not learn every token but the 800 BOS: $(grep -m1 'training data' "$tmp/log")"
head -5 configs/data/tiny-chat.jsonl >"$tmp/bad-chat.jsonl"
echo '{"messages": [{"role": "user", "content": "hi"}, {"role": "tool", "content": "x"}]}' >>"$tmp/bad-chat.jsonl"
"$st" run configs/tiny-chat.toml -n 1 --set "job.output_dir=$tmp/bad-chat" --set "data.train_file=$tmp/bad-chat.jsonl" \
  >"$tmp/log" 2>&1 && fail "a bad conversation trained"
grep -q "bad record at $tmp/bad-chat.jsonl:6: messages\[1\]: unknown role \"tool\"" "$tmp/log" ||
  fail "the bad conversation is not named: $(grep -m1 -i error "$tmp/log")"

# A validation set that evaluates nothing: one record cannot be split off; one whose only response
# is cut away leaves no learned token (at 80 tokens, tiny-alpaca's training examples, whose prompts
# are 61 to 71 tokens, keep theirs). Both stop the job before training, naming the file.
printf '[{"instruction": "a", "input": "", "output": "b"}]\n' >"$tmp/one.json"
if "$st" run configs/tiny-alpaca.toml -n 1 --set "job.output_dir=$tmp/one" --set "data.train_file=$tmp/one.json" \
  --set train.batch_size_training=1 >"$tmp/log" 2>&1; then
  fail "a validation split of one record trained"
fi
grep -q "no validation record: $tmp/one.json (val_fraction = 0.05) holds out none" "$tmp/log" ||
  fail "no validation record: $(grep -m1 rror "$tmp/log")"
if "$st" run configs/tiny-alpaca.toml -n 1 --set "job.output_dir=$tmp/cut" --set "data.val_file=$tmp/long-val.json" \
  --set train.batching_strategy=padding --set train.context_length=80 >"$tmp/log" 2>&1; then
  fail "a validation set without a learned token trained"
fi
grep -q "no validation example of $tmp/long-val.json keeps a learned token" "$tmp/log" ||
  fail "no learned validation token: $(grep -m1 rror "$tmp/log")"
[[ -f "$tmp/cut/metrics.jsonl" ]] && fail "the job without validation tokens trained a step"

((failures == 0)) && echo "PASS"
exit $((failures > 0))
