#!/usr/bin/env bash
# Invalid job files and hostile strings never reach sbatch or a shell.
#  - Every bad job file of the corpus, and every hostile value in every field that reaches the
#    batch script, is either rejected (exit 2, nothing submitted) or accepted and then written so
#    that the script passes `bash -n`, holds exactly the intended #SBATCH lines, and the shell
#    reads back exactly the value (never running it).
#  - One accepted hostile checkpoint directory goes through a real job: the checkpoint lands in
#    exactly that directory and nothing the string says is executed.
# usage: hostile_test.sh SHARDTUNE SOURCE_DIR WORK_DIR   (SLURM_CONF set: a running test cluster)
set -u
st=$1 src=$2 work=$3
py=/usr/bin/python3
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
canary="$work/canary"
# The newest job id slurmctld knows (0: none). Job ids only grow, while finished jobs leave
# slurmctld's list after MinJobAge: a count of the jobs it lists is no measure of submissions.
newest_job() { scontrol show jobs -o 2>/dev/null | grep -o 'JobId=[0-9]*' | cut -d= -f2 | sort -n | tail -1; }
before=$(newest_job)
before=${before:-0}

# 0. Slurm's clock: this cluster's SlurmdTimeout is 60 s (cluster.sh). A collective timeout that
# does not come first is warned about at submit; one that does is not.
"$st" submit "$src/tests/slurm/tiny-2x2.toml" --dry-run --set "job.output_dir=$work/clock" \
  --set launch.collective_timeout_s=120 >/dev/null 2>"$work/clock.err" || fail "submit --dry-run failed: $(cat "$work/clock.err")"
grep -q "collective_timeout_s = 120 s is not below this cluster's SlurmdTimeout (60 s)" "$work/clock.err" ||
  fail "no warning for a collective timeout past SlurmdTimeout: $(cat "$work/clock.err")"
"$st" submit "$src/tests/slurm/tiny-2x2.toml" --dry-run --set "job.output_dir=$work/clock" \
  --set launch.collective_timeout_s=30 >/dev/null 2>"$work/clock.err"
grep -q "SlurmdTimeout" "$work/clock.err" && fail "a warning for a collective timeout below SlurmdTimeout"

# 1. The corpus of bad job files: rejected, nothing submitted.
for f in "$src"/tests/fixtures/jobs/bad/*.toml; do
  "$st" submit "$f" >"$work/out" 2>"$work/err"
  rc=$?
  [[ $rc -eq 2 ]] || fail "$(basename "$f"): submit exit $rc, expected 2: $(head -3 "$work/err")"
  [[ -s "$work/out" ]] && fail "$(basename "$f"): submit printed a job id: $(cat "$work/out")"
done

# 2. Hostile values in every field that reaches the script. The generator writes one job file
# per (field, value) and the expected outcome; the checks below run each through submit.
$py - "$src/tests/slurm/tiny-2x2.toml" "$work" "$canary" <<'PY'
import json, os, sys
base, work, canary = sys.argv[1], sys.argv[2], sys.argv[3]
text = open(base).read()
hostile = [
    "a b", "it's", 'say "hi"', f"$(touch {canary})", f"`touch {canary}`", f"x;touch {canary}",
    "a\nb", "a\u0000b", "a\rb", "a\tb", "\u001b[31mred", "--partition=evil", "-J x", "#SBATCH --x", "a\\b",
    "${HOME}", "50%j", "ünïcode", "a|b&c", "x' ; touch " + canary + " ; '", "\n#SBATCH --wrap=evil",
    "ok-value_1.2", "a)b(c", "*", "~",
]
sbatch_word = lambda s: s != "" and all(0x20 < ord(c) < 0x7f and c not in "\"'\\#$`" for c in s)
one_line = lambda s: all(ord(c) >= 0x20 and ord(c) != 0x7f for c in s)
simple_name = lambda s: 0 < len(s) <= 128 and all(c.isascii() and (c.isalnum() or c in "._-") for c in s)
# field -> (TOML section, key, accepted?, how the value appears in the script)
fields = {
    "job.name": (simple_name, "sbatch", "--job-name={}"),
    "job.output_dir": (lambda s: sbatch_word(s) and "%" not in s, "path", None),
    "slurm.partition": (sbatch_word, "sbatch", "--partition={}"),
    "slurm.account": (sbatch_word, "sbatch", "--account={}"),
    "slurm.qos": (sbatch_word, "sbatch", "--qos={}"),
    "slurm.constraint": (sbatch_word, "sbatch", "--constraint={}"),
    "slurm.mail_user": (sbatch_word, "sbatch", "--mail-user={}"),
    "slurm.mail_type": (sbatch_word, "sbatch", "--mail-type={}"),
    "slurm.extra_sbatch_options": (lambda s: s.startswith("-") and sbatch_word(s), "sbatch-list", "{}"),
    "checkpoint.dir": (one_line, "quoted", None),
    "launch.extra_srun_options": (one_line, "quoted-list", None),
}
cases = []
n = 0
for field, (accept, kind, fmt) in fields.items():
    section, key = field.split(".")
    for value in hostile:
        n += 1
        v = value
        if kind == "path" or (kind == "quoted" and not value.startswith("/")):
            v = f"{work}/p{n}/{value}"  # absolute, so only the hostile part differs
        literal = json.dumps([v] if kind.endswith("list") else v, ensure_ascii=False)
        body = text if field != "job.name" else text.replace('name = "tiny-2x2"\n', "", 1)
        header = f"[{section}]\n"
        if header in body:
            body = body.replace(header, f"{header}{key} = {literal}\n", 1)
        else:
            body += f"\n{header}{key} = {literal}\n"
        if field != "job.output_dir":
            body = body.replace("[job]\n", f"[job]\noutput_dir = \"{work}/out{n}\"\n", 1)
        path = f"{work}/case{n}.toml"
        with open(path, "w", encoding="utf-8", newline="") as f:
            f.write(body)
        ok = accept(v)
        sbatch_line = fmt.format(v) if (fmt and ok) else ""
        cases.append({"file": path, "field": field, "value": v, "accept": ok, "kind": kind, "sbatch": sbatch_line})
json.dump(cases, open(f"{work}/cases.json", "w"))
print(f"{len(cases)} hostile cases, {sum(c['accept'] for c in cases)} of them acceptable")
PY

$py - "$st" "$work/cases.json" <<'PY' || failures=$((failures + 1))
import json, subprocess, sys
st, cases = sys.argv[1], json.load(open(sys.argv[2]))
bad = 0
def fail(c, why):
    global bad
    bad += 1
    print(f"FAIL: {c['field']} = {c['value']!r}: {why}")
for c in cases:
    r = subprocess.run([st, "submit", c["file"], "--dry-run"], capture_output=True)
    if not c["accept"]:
        if r.returncode != 2:
            fail(c, f"expected rejection (exit 2), got exit {r.returncode}")
        elif c["field"].split(".")[1] not in r.stderr.decode(errors="replace"):
            fail(c, "the error does not name the key: " + r.stderr.decode(errors="replace")[:200])
        continue
    if r.returncode != 0:
        fail(c, f"rejected (exit {r.returncode}) but should be accepted: {r.stderr.decode(errors='replace')[:300]}")
        continue
    out = r.stdout.decode()
    script = out.split("\n# sbatch argv")[0]
    if subprocess.run(["bash", "-n"], input=script.encode()).returncode != 0:
        fail(c, "the script does not pass bash -n")
    lines = [l[len("#SBATCH "):] for l in script.splitlines() if l.startswith("#SBATCH")]
    if c["sbatch"] and c["sbatch"] not in lines:
        fail(c, f"no #SBATCH line {c['sbatch']!r}")
    # Every #SBATCH line is one option sbatch reads as one word.
    for l in lines:
        if not l.startswith("--") or any(ch.isspace() for ch in l) or any(q in l for q in "\"'\\#$`"):
            fail(c, f"unsafe #SBATCH line {l!r}")
    if len(lines) != len(set(lines)) or sum(l.startswith("--job-name=") for l in lines) != 1:
        fail(c, f"unexpected #SBATCH lines {lines}")
    if c["kind"] in ("quoted", "quoted-list"):
        # The shell reads the value back exactly: run only the script's assignments.
        assign = [l for l in script.splitlines() if l.startswith("readonly CHECKPOINT_DIR=") or l.startswith("ranks=(")]
        probe = "\n".join(assign) + '\nprintf "%s\\0" "$CHECKPOINT_DIR" "${ranks[@]}"\n'
        got = subprocess.run(["bash", "-c", probe], capture_output=True).stdout.split(b"\0")
        if c["value"].encode() not in got:
            fail(c, f"the shell read {got!r}")
print(f"hostile values: {len(cases)} cases checked, {bad} failure(s)")
sys.exit(1 if bad else 0)
PY

[[ -e "$canary" ]] && fail "a hostile string was executed: $canary exists"
after=$(newest_job)
((${after:-0} <= before)) || fail "jobs were submitted by rejected or dry-run cases (newest job $before -> $after)"

# 3. A real job whose checkpoint directory is hostile but valid: it lands exactly there.
weird="$work/ck \$(touch $canary) \`touch $canary\`; it's \"x\""
out="$work/real"
id=$("$st" submit "$src/tests/slurm/tiny-2x2.toml" --set "job.output_dir=$out" --set train.max_train_step=20 \
  --set checkpoint.every_steps=10 --set "checkpoint.dir=$(printf '%s' "$weird" | $py -c 'import json,sys; print(json.dumps(sys.stdin.read()))')" 2>"$work/err")
[[ -n "$id" ]] || fail "submit of the hostile checkpoint dir failed: $(cat "$work/err")"
for _ in $(seq 1 400); do
  s=$(scontrol show job -o "$id" 2>/dev/null | grep -o 'JobState=[A-Z_]*' | cut -d= -f2)
  [[ "$s" == COMPLETED || "$s" == FAILED || "$s" == CANCELLED ]] && break
  sleep 1
done
[[ "$s" == COMPLETED ]] || { fail "the hostile-directory job ended $s"; tail -20 "$out/slurm-$id.out"; }
[[ "$(readlink "$weird/latest")" == step-0000020 ]] || fail "no checkpoint in the hostile directory: $(ls "$work")"
grep -q "last checkpoint: step 20" "$out/slurm-$id.out" || fail "the batch script did not read the hostile directory"
[[ -e "$canary" ]] && fail "a hostile string was executed: $canary exists"

((failures == 0)) && echo "hostile strings: all rejected or inert"
exit $((failures > 0))
