#!/usr/bin/env bash
# Several data sources ([[data.sources]]) through `shardtune run`, checked against what each
# source holds and against a run without sources:
#  - one source of weight 1 is the job without sources: metrics.jsonl the same, record for record
#    (losses bitwise, timings aside), and it resumes that job's checkpoint;
#  - conversations (chat, weight 3) mixed with alpaca records (weight 1), 2 ranks, 2 epochs: the log
#    says what an epoch takes of each; each epoch takes each source's weight's share within 2
#    samples, the sample ids trained map to the sources in those numbers, and the steps' per-source
#    counts add up to them; each source's held-out part is validated on its own and the whole loss
#    is their mean over all their tokens; TensorBoard holds every scalar (tensorboard_check.py);
#    `shardtune plot` draws sources.png, `shardtune status` counts each source's samples;
#  - DPO on two sources of preference pairs, the reference precomputed: trains, validates each
#    source's pairs on its own (val_pairs add up), and a second start reads the stored
#    log-probabilities back;
#  - a missing file, a source with no records and an empty source file are refused, naming the file.
# usage: mixture_test.sh SHARDTUNE SOURCE_DIR
set -u
st=$1 src=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
cd "$src" || exit 1
py=/usr/bin/python3

head_toml() {  # head_toml NAME
  cat <<TOML
[job]
name = "$1"
output_dir = "$tmp/$1"
[slurm]
ntasks_per_node = 2
[launch]
launcher = "mpirun"
collective_timeout_s = 120.0
device = "cpu"
[model]
preset = "tiny"
init = "random"
TOML
}
tail_toml() {
  cat <<TOML
[train]
batch_size_training = 2
context_length = 128
num_epochs = 2
lr = 3e-3
mixed_precision = false
max_eval_step = 0
[fsdp]
activation_checkpointing = false
[checkpoint]
every_steps = 0
[metrics]
log_every_steps = 1000
sample_ids = true
tensorboard = true
TOML
}

# One source of weight 1 against [data] alone.
{ head_toml plain; printf '[data]\nformat = "alpaca"\ntrain_file = "configs/data/tiny-alpaca.json"\n'
  printf 'tokenizer = "configs/data/tiny-tokenizer/tokenizer.json"\n'; tail_toml; } >"$tmp/plain.toml"
{ head_toml single; printf '[data]\nformat = "alpaca"\ntokenizer = "configs/data/tiny-tokenizer/tokenizer.json"\n'
  printf '[[data.sources]]\nname = "all"\nweight = 1.0\ntrain_file = "configs/data/tiny-alpaca.json"\n'; tail_toml; } >"$tmp/single.toml"
for job in plain single; do
  "$st" run "$tmp/$job.toml" -n 2 --set train.max_train_step=8 >"$tmp/$job.log" 2>&1 ||
    { fail "$job: the run failed"; tail -5 "$tmp/$job.log"; }
done
strip() { sed 's/, "step_seconds".*//' "$1"; }
[ "$(strip "$tmp/plain/metrics.jsonl")" = "$(strip "$tmp/single/metrics.jsonl")" ] && [ -s "$tmp/plain/metrics.jsonl" ] ||
  fail "one source of weight 1 trains otherwise than [data] alone: $(diff <(strip "$tmp/plain/metrics.jsonl") <(strip "$tmp/single/metrics.jsonl") | head -4)"

# Either spelling resumes the other's checkpoint: one source's identity is [data]'s.
"$st" run "$tmp/single.toml" -n 1 --set train.max_train_step=10 --set "job.output_dir=$tmp/crossed" \
  --set "checkpoint.resume=$tmp/plain/checkpoints/latest" >"$tmp/crossed.log" 2>&1 ||
  fail "one source did not resume the checkpoint of [data] alone: $(tail -3 "$tmp/crossed.log")"
grep -q "resuming at step 8" "$tmp/crossed/logs/rank-00000.log" || fail "one source did not resume at step 8"

# Conversations and alpaca records, 3 to 1.
{ head_toml mixed; printf '[data]\ntokenizer = "configs/data/tiny-chat-tokenizer/tokenizer.json"\nval_fraction = 0.1\n'
  printf '[[data.sources]]\nname = "chat"\nformat = "chat"\ntrain_file = "configs/data/tiny-chat.jsonl"\nweight = 3\n'
  printf '[[data.sources]]\nname = "alpaca"\nformat = "alpaca"\ntrain_file = "configs/data/tiny-alpaca.json"\nweight = 1\n'
  tail_toml; } >"$tmp/mixed.toml"
"$st" run "$tmp/mixed.toml" -n 2 >"$tmp/mixed.log" 2>&1 || { fail "the mixed run failed"; tail -5 "$tmp/mixed.log"; }
$py - "$tmp/mixed" <<'PY' || fail "the mixture is not what its weights ask"
import collections, json, math, re, sys
run = sys.argv[1]
log = open(f"{run}/logs/rank-00000.log").read()
line = re.search(r"mixture: an epoch takes (\d+) samples: (.*)", log)
assert line, "no mixture line in the log"
epoch = int(line.group(1))
plan = [(n, int(per), int(size)) for n, per, size in re.findall(r'"(\w+)" (\d+) of its (\d+)', line.group(2))]
assert [p[0] for p in plan] == ["chat", "alpaca"], plan
weights = {"chat": 0.75, "alpaca": 0.25}
offsets, at = {}, 0
for name, per, size in plan:
    assert abs(per - weights[name] * epoch) < 2, (name, per, epoch)
    offsets[name] = (at, at + size)
    at += size
records = [json.loads(l) for l in open(f"{run}/metrics.jsonl")]
steps = [r for r in records if "step" in r]
by_epoch = collections.Counter()
counted = collections.Counter()
for r in steps:
    counted.update(r["sources"])
    for ids in r["sample_ids"]:
        for i in ids:
            name = next(n for n, (a, b) in offsets.items() if a <= i < b)
            by_epoch[(r["epoch"], name)] += 1
for name, per, _ in plan:
    for e in (1, 2):
        assert by_epoch[(e, name)] == per, (e, name, by_epoch)
    assert counted[name] == 2 * per, (name, counted)
evals = [r for r in records if "val_loss" in r]
assert len(evals) == 2, evals
for e in evals:
    parts = e["val_sources"]
    assert set(parts) == {"chat", "alpaca"}, parts
    tokens = sum(p["val_tokens"] for p in parts.values())
    assert tokens == e["val_tokens"] and sum(p["val_rows"] for p in parts.values()) == e["val_rows"], e
    mean = sum(p["val_loss"] * p["val_tokens"] for p in parts.values()) / tokens
    assert math.isclose(mean, e["val_loss"], rel_tol=1e-9), (mean, e)
    for p in parts.values():
        assert math.isclose(p["val_perplexity"], math.exp(p["val_loss"]), rel_tol=1e-12), p
print(f"mixture: an epoch of {epoch}: {plan}; trained {dict(counted)}; validation {evals[-1]['val_sources']}")
PY
$py tests/cli/tensorboard_check.py "$tmp/mixed" 1 || fail "the mixed run's TensorBoard files are not its metrics.jsonl"
grep -q '"val/chat/loss"\|val/chat/loss' <(strings "$tmp"/mixed/tensorboard/events.out.tfevents.*) ||
  fail "TensorBoard has no val/chat/loss"
"$st" plot "$tmp/mixed" --width 640 --height 400 >"$tmp/plot.out" 2>&1 || fail "plot failed: $(cat "$tmp/plot.out")"
grep -qx "$tmp/mixed/plots/sources.png" "$tmp/plot.out" || fail "plot drew no sources.png: $(cat "$tmp/plot.out")"
$py tests/cli/png_check.py "$tmp/mixed/plots/sources.png" 640 400 9400d3 || fail "sources.png is not a chart"
"$st" status "$tmp/mixed" >"$tmp/status" 2>&1 || fail "status failed: $(cat "$tmp/status")"
want=$($py -c "
import collections, json, sys
c = collections.Counter()
for l in open(sys.argv[1]):
    r = json.loads(l)
    c.update(r.get('sources', {}))
print(f\"chat {c['chat']} (\")" "$tmp/mixed/metrics.jsonl")
grep "^samples trained: " "$tmp/status" | grep -qF "$want" || fail "status does not count the sources ($want): $(cat "$tmp/status")"
grep -q "validation by source: .*chat loss" "$tmp/status" || fail "status shows no validation by source"

# DPO on two sources of pairs, the reference precomputed once and read back.
head -n 300 configs/data/tiny-preference.jsonl >"$tmp/pairs-a.jsonl"
tail -n +301 configs/data/tiny-preference.jsonl | head -n 150 >"$tmp/pairs-b.jsonl"
{ head_toml dpo; printf '[data]
format = "preference"
tokenizer = "configs/data/tiny-chat-tokenizer/tokenizer.json"
val_fraction = 0.05
'
  printf '[[data.sources]]
name = "a"
train_file = "%s"
weight = 2
' "$tmp/pairs-a.jsonl"
  printf '[[data.sources]]
name = "b"
train_file = "%s"
weight = 1
' "$tmp/pairs-b.jsonl"
  tail_toml | sed 's/^num_epochs = 2/num_epochs = 1\nbatching_strategy = "padding"\nobjective = "dpo"/'
  printf '[dpo]
reference = "precomputed"
'; } >"$tmp/dpo.toml"
for start in 1 2; do
  "$st" run "$tmp/dpo.toml" -n 2 --set "train.max_train_step=$((start * 3))" >"$tmp/dpo$start.log" 2>&1 ||
    { fail "DPO over two sources, start $start, failed"; tail -5 "$tmp/dpo$start.log"; }
done
cat "$tmp"/dpo/logs/rank-00000*.log "$tmp"/dpo?.log >"$tmp/dpo-all.log" 2>/dev/null
grep -q "computed the reference's log-probabilities" "$tmp/dpo-all.log" &&
  grep -q "the reference's log-probabilities of the .* pairs from" "$tmp/dpo-all.log" ||
  fail "DPO over two sources did not compute its reference once and read it back"
$py - "$tmp/dpo" <<'PY' || fail "DPO over two sources: its records are wrong"
import json, math, sys
records = [json.loads(l) for l in open(f"{sys.argv[1]}/metrics.jsonl")]
steps = [r for r in records if "step" in r]
assert [r["step"] for r in steps] == list(range(1, 7)) and all("rewards/margins" in r for r in steps), steps
assert all(sum(r["sources"].values()) == 4 for r in steps), [r["sources"] for r in steps]
evals = [r for r in records if "val_loss" in r]
assert evals, "no validation"
for e in evals:
    parts = e["val_sources"]
    assert set(parts) == {"a", "b"} and sum(p["val_pairs"] for p in parts.values()) == e["val_pairs"], e
    mean = sum(p["val_loss"] * p["val_pairs"] for p in parts.values()) / e["val_pairs"]
    assert math.isclose(mean, e["val_loss"], rel_tol=1e-9) and "val_perplexity" not in parts["a"], e
print(f"DPO over two sources: {len(steps)} steps, validation {evals[-1]['val_sources']}")
PY

# Refusals, each naming the file.
refused() {  # refused WHAT FILE-NAMED SOURCE-TOML
  { head_toml bad; printf '[data]\ntokenizer = "configs/data/tiny-chat-tokenizer/tokenizer.json"\n'
    printf '[[data.sources]]\nname = "chat"\nformat = "chat"\ntrain_file = "configs/data/tiny-chat.jsonl"\n'
    printf '%s\n' "$3"; tail_toml; } >"$tmp/bad.toml"
  rm -rf "$tmp/bad"
  if "$st" run "$tmp/bad.toml" -n 1 >"$tmp/bad.log" 2>&1; then
    fail "$1 was accepted"
  elif ! grep -q "$2" "$tmp/bad.log" "$tmp"/bad/logs/rank-*.log 2>/dev/null; then
    fail "$1: the error does not name $2: $(tail -3 "$tmp/bad.log")"
  fi
}
: >"$tmp/empty.json"
echo '[]' >"$tmp/none.json"
refused "a missing file" "$tmp/missing.json" \
  "$(printf '[[data.sources]]\nformat = "alpaca"\ntrain_file = "%s"\n' "$tmp/missing.json")"
refused "a source with no records" "$tmp/none.json" \
  "$(printf '[[data.sources]]\nformat = "alpaca"\ntrain_file = "%s"\n' "$tmp/none.json")"
refused "an empty source file" "$tmp/empty.json" \
  "$(printf '[[data.sources]]\nformat = "alpaca"\ntrain_file = "%s"\n' "$tmp/empty.json")"

[ "$failures" -eq 0 ] && echo "mixture_test: all checks passed"
exit $((failures > 0))
