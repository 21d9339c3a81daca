#!/usr/bin/env python3
"""Exactly once, whatever happens between starts: a property test through `shardtune run`.

For packing, for padding, for DPO's preference pairs (a pair one sample; the reference's
log-probabilities precomputed by the first start and read by the others, at any world size) and for
a mixture of three alpaca sources by weight ([[data.sources]], two with a validation file of their
own; an epoch ends where the first source would start over, so the others run through their samples
across epochs), an uninterrupted run gives the reference. Then random sequences of
starts, each at a random world size (1 to 4 ranks) and each ended by a stop signal after a random
step (SIGUSR1 to a random rank, as Slurm sends ahead of a time limit), by a non-finite loss on a
random rank at a random step (the run stops with exit 3, every save due before that step
committed, the one written in the background too), or by a SIGKILL of a random rank at a random
phase of a checkpoint save, or by a stop signal (INT, TERM or USR1) to `shardtune run` itself at a
random moment from its first millisecond, then resumed by the next start, until a last start
finishes the job. Between starts, a start over other data (another seed, another context length)
must be refused, naming what changed, with nothing trained or saved. Every stop and kill lands at or before the job's last step (a kill may hit the
last step's save), so every start but the last is cut short; a mode's kills take the five phases in
turn (packing from the first, padding from the fourth), and the first start of sequences 2 and 3
(and of packing's 1) is a kill, so that between them the two modes kill at every phase. The first
sequence of each mode stops exactly at the end of epoch 1. The modes run side by side, each from its
own seed. Padding writes its checkpoints in the background ([checkpoint] async): its kills land on a
save's own thread (files-written) or at a later step boundary (the commit), its stops wait for the
save in flight; packing's saves block. Every job must end with:
  - the multiset of (epoch, sample id) trained, from the sample_ids of metrics.jsonl (the debug
    record each rank's trained samples go to), equal to the reference run's, and to every sample
    of the alpaca file once per epoch (its 37 records do not divide any global batch here);
  - the last step's learning rate equal to the cosine schedule's formula at that step's first
    sample (positions over the whole run, warmup counted in the first start's global batch);
  - the newest checkpoint at the last step, its cursor at the end of the data;
  - one validation per epoch;
  - for the mixture, each source's samples trained exactly once per pass over it: a source an
    epoch takes k of, over the run's T = k x epochs, trains each of its samples T // size or
    T // size + 1 times, the latter exactly T % size of them; each epoch takes of each source its
    weight's share within 2 samples; the steps' per-source counts add up to the sample ids'.

usage: exactly_once_test.py SHARDTUNE SOURCE_DIR WORK_DIR [SEQUENCES_PER_MODE]
"""
import collections
import concurrent.futures
import json
import math
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import threading

st, src, work = sys.argv[1], sys.argv[2], sys.argv[3]
per_mode = int(sys.argv[4]) if len(sys.argv) > 4 else 4
RECORDS, EPOCHS, PER_RANK, WARMUP, LR, EVERY = 37, 2, 2, 3, 3e-3, 3
PHASES = ("started", "files-written", "manifest-written", "renamed", "latest-updated")
failures, killed_at = [], set()
printing = threading.Lock()


def say(*what):
    with printing:
        print(*what, flush=True)


def fail(what):
    say("FAIL:", what)
    failures.append(what)


shutil.rmtree(work, ignore_errors=True)
os.makedirs(work)
records = json.load(open(os.path.join(src, "configs/data/tiny-alpaca.json")))
json.dump(records[:RECORDS], open(os.path.join(work, "train.json"), "w"))
json.dump(records[RECORDS:RECORDS + 8], open(os.path.join(work, "val.json"), "w"))
pairs = open(os.path.join(src, "configs/data/tiny-preference.jsonl")).readlines()
open(os.path.join(work, "pairs.jsonl"), "w").writelines(pairs[:RECORDS])
open(os.path.join(work, "pairs-val.jsonl"), "w").writelines(pairs[RECORDS:RECORDS + 8])
# The mixture: the same 37 records as three sources of 20, 12 and 5, weighted 3, 1 and 1.
MIX = [("large", 3.0, records[:20]), ("medium", 1.0, records[20:32]), ("small", 1.0, records[32:RECORDS])]
for name, _, part in MIX:
    json.dump(part, open(os.path.join(work, f"{name}.json"), "w"))
json.dump(records[RECORDS:RECORDS + 4], open(os.path.join(work, "val-large.json"), "w"))
json.dump(records[RECORDS + 4:RECORDS + 8], open(os.path.join(work, "val-medium.json"), "w"))
# DPO on the pairs: full fine-tuning against its starting weights, precomputed.
PREFERENCE = ["train.objective=dpo", "data.format=preference", f"data.train_file={work}/pairs.jsonl",
              f"data.val_file={work}/pairs-val.jsonl",
              f"data.tokenizer={os.path.join(src, 'configs/data/tiny-chat-tokenizer/tokenizer.json')}",
              "dpo.reference=precomputed"]
tokenizer = os.path.join(src, "configs/data/tiny-tokenizer/tokenizer.json")
with open(os.path.join(work, "job.toml"), "w") as f:
    f.write(f"""[job]
name = "exactly-once"
[slurm]
ntasks_per_node = 2
[launch]
launcher = "mpirun"
collective_timeout_s = 120.0
device = "cpu"
[model]
preset = "tiny"
init = "random"
[data]
format = "alpaca"
train_file = "{work}/train.json"
val_file = "{work}/val.json"
tokenizer = "{tokenizer}"
[train]
batch_size_training = {PER_RANK}
context_length = 96
num_epochs = {EPOCHS}
lr = {LR}
lr_scheduler = "cosine"
warmup_steps = {WARMUP}
mixed_precision = false
max_eval_step = 2
[fsdp]
activation_checkpointing = false
[checkpoint]
every_steps = {EVERY}
keep_last = 2
[metrics]
log_every_steps = 1000
sample_ids = true
""")

job_text = open(os.path.join(work, "job.toml")).read()
sources = "".join(f"""[[data.sources]]
name = "{name}"
weight = {weight}
train_file = "{work}/{name}.json"
{f'val_file = "{work}/val-{name}.json"' if name != "small" else "val_fraction = 0.0"}
""" for name, weight, _ in MIX)
with open(os.path.join(work, "job-mixture.toml"), "w") as f:
    f.write(job_text.replace(f'train_file = "{work}/train.json"\nval_file = "{work}/val.json"\n', "")
            .replace("[train]\n", sources + "[train]\n"))


def start(out, ranks, mode, env=None, signal_after=None, sets=()):
    batching = {"preference": "padding", "mixture": "padding"}.get(mode, mode)
    job = os.path.join(work, "job-mixture.toml" if mode == "mixture" else "job.toml")
    cmd = [st, "run", job, "-n", str(ranks), "--set", f"job.output_dir={out}",
           "--set", f"train.batching_strategy={batching}", "--set", f"checkpoint.async={str(mode != 'packing').lower()}"]
    for s in (PREFERENCE if mode == "preference" else []) + list(sets):
        cmd += ["--set", s]
    with open(os.path.join(out + ".log"), "a") as log:
        log.write(f"\n$ {' '.join(cmd)}  ({env or ''})\n")
        log.flush()
        # The two modes run at once: each its own Open MPI session directory (tests/CMakeLists.txt says why).
        session = {"OMPI_MCA_orte_tmpdir_base": os.path.join(work, "mpi-session", mode)}
        p = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, **session, **(env or {})})
        if signal_after is not None:  # (seconds, signal) to `shardtune run` itself, as a user's Ctrl-C or kill
            try:
                p.wait(timeout=signal_after[0])
            except subprocess.TimeoutExpired:
                p.send_signal(signal_after[1])
        return p.wait()


def steps_of(out):
    path = os.path.join(out, "metrics.jsonl")
    if not os.path.exists(path):
        return []
    return [json.loads(l) for l in open(path) if l.strip()]


def committed(out):
    root = os.path.join(out, "checkpoints")
    return os.path.isdir(root) and any(
        d.startswith("step-") and os.path.exists(os.path.join(root, d, "manifest.json")) for d in os.listdir(root))


def resume_point(out):
    """(step, epoch, sample in epoch) where the next start resumes: the newest committed checkpoint's."""
    root, newest = os.path.join(out, "checkpoints"), (0, 0, 0, 0)
    for d in os.listdir(root) if os.path.isdir(root) else []:
        path = os.path.join(root, d, "manifest.json")
        if re.fullmatch(r"step-[0-9]+", d) and os.path.exists(path):
            m = json.load(open(path))
            newest = max(newest, (m["commit"], m["step"], m["epoch"], m["sample_in_epoch"]))
    return newest[1:]


def span(out, ranks, rows):
    """(the step the next start resumes at, the step it ends the job at with `ranks` ranks): ceil(samples
    left / global batch) steps in each epoch left."""
    step, epoch, sample = resume_point(out)
    if sample >= rows:
        epoch, sample = epoch + 1, 0
    left = sum(-(-(rows - (sample if e == epoch else 0)) // (PER_RANK * ranks)) for e in range(epoch, EPOCHS))
    return step, step + left


def trained(out):
    """(epoch, sample id) of every sample every rank trained, from the debug record."""
    return collections.Counter((r["epoch"], i) for r in steps_of(out) if "step" in r
                               for ids in r["sample_ids"] for i in ids)


def expected_last_lr(first_batch, rows, last):
    """The cosine schedule at the last step's first sample, over positions of the whole run."""
    end = rows * EPOCHS
    per_epoch = -(-rows // first_batch)
    warm = WARMUP // per_epoch * rows + WARMUP % per_epoch * first_batch
    before = (last["epoch"] - 1) * rows + last["samples"][0]
    if before < warm:
        return LR * min(1.0, (before + last["samples"][1] - last["samples"][0]) / warm)
    return LR * 0.5 * (1 + math.cos(math.pi * min(1.0, (before - warm) / (end - warm))))


def check(name, out, reference, rows, first_batch):
    got = trained(out)
    if got != reference:
        extra, missing = got - reference, reference - got
        fail(f"{name}: trained samples differ from the uninterrupted run: extra {dict(extra)}, missing {dict(missing)}")
    # A mixture's source may end one pass and start the next within an epoch (check_mixture holds
    # it to once per pass); any other sample is trained once per epoch.
    once = name.startswith("mixture") or set(got.values()) == {1}
    if not once or sum(got.values()) != rows * EPOCHS:
        fail(f"{name}: {sum(got.values())} samples trained over {len(got)} (epoch, sample) pairs, {rows * EPOCHS} "
             f"expected, each once per epoch")
    records = steps_of(out)
    steps = [r for r in records if "step" in r]
    if [r["step"] for r in steps] != list(range(1, len(steps) + 1)):
        fail(f"{name}: metrics.jsonl steps are not 1..{len(steps)} once each")
    evals = [r["eval_epoch"] for r in records if "eval_epoch" in r]
    if evals != list(range(1, EPOCHS + 1)):
        fail(f"{name}: validations of epochs {evals}, expected one per epoch")
    last = steps[-1]
    want = expected_last_lr(first_batch, rows, last)
    if abs(last["lr"] - want) > 1e-12 * LR:
        fail(f"{name}: the last step's learning rate is {last['lr']}, the schedule gives {want}")
    latest = os.path.realpath(os.path.join(out, "checkpoints", "latest"))
    manifest = json.load(open(os.path.join(latest, "manifest.json")))
    if manifest["step"] != last["step"] or (manifest["epoch"], manifest["sample_in_epoch"]) != (EPOCHS, 0):
        fail(f"{name}: the newest checkpoint is step {manifest['step']} at epoch {manifest['epoch']} sample "
             f"{manifest['sample_in_epoch']}; the last step is {last['step']}")
    if name.startswith("mixture"):
        check_mixture(name, out, got, steps)


def mixture_plan(out):
    """[(name, weight, per epoch, size, offset)] from the log's line on what an epoch takes."""
    log = open(os.path.join(out, "logs", "rank-00000.log")).read()
    line = re.search(r"mixture: an epoch takes (\d+) samples: (.*)", log)
    plan, offset = [], 0
    for name, per, size in re.findall(r'"(\w+)" (\d+) of its (\d+)', line.group(2)):
        weight = next(w for n, w, _ in MIX if n == name)
        plan.append((name, weight, int(per), int(size), offset))
        offset += int(size)
    assert sum(p[2] for p in plan) == int(line.group(1)), line.group(0)
    return plan


def check_mixture(name, out, got, steps):
    plan = mixture_plan(out)
    epoch = sum(p[2] for p in plan)
    total_weight = sum(p[1] for p in plan)
    counted = collections.Counter()
    for r in steps:
        counted.update(r["sources"])
    for source, weight, per, size, offset in plan:
        if abs(per - weight / total_weight * epoch) >= 2:
            fail(f"{name}: an epoch takes {per} of {source}, its weight's share is {weight / total_weight * epoch:.2f}")
        times = collections.Counter()
        for (_, i), n in got.items():
            if offset <= i < offset + size:
                times[i] += n
        trained = sum(times.values())
        k, r = divmod(trained, size)
        if trained != per * EPOCHS or counted[source] != trained:
            fail(f"{name}: {source} trained {trained} samples, the steps count {counted[source]}, "
                 f"{per} x {EPOCHS} epochs expected")
        over = [i for i in range(offset, offset + size) if times[i] not in (k, k + 1)]
        if over or sum(1 for i in range(offset, offset + size) if times[i] == k + 1) != r:
            fail(f"{name}: {source}'s samples are not trained once per pass: {dict(times)}")


def sequences(mode):
    rng = random.Random(f"20261125-{mode}")  # a seed per mode: the same sequences whichever thread runs first
    phases = []  # the kill phases not yet used in this round
    offset = {"packing": 0, "padding": 3, "preference": 1, "mixture": 2}[mode]
    ref_out = os.path.join(work, f"{mode}-reference")
    if start(ref_out, 3, mode) != 0:
        fail(f"{mode}: the uninterrupted run failed (see {ref_out}.log)")
        return
    reference = trained(ref_out)
    rows = sum(n for (e, _), n in reference.items() if e == 1)  # samples per epoch
    say(f"{mode}: {rows} samples per epoch, {len(steps_of(ref_out))} records in the uninterrupted run")
    for n in range(min(per_mode, 2) if mode == "mixture" else per_mode):
        out = os.path.join(work, f"{mode}-{n}")
        ranks = rng.randint(1, 4)
        first_batch = None  # the global batch of the start that committed the job's first checkpoint
        story = []
        # The first sequence stops at the last step of epoch 1 (2 ranks, global batch 4): that
        # epoch's validation must still happen, once, when the next start resumes.
        epoch_end = -(-rows // (PER_RANK * 2)) if n == 0 else None
        if epoch_end:
            ranks = 2
        for _ in range(1 if epoch_end else rng.randint(1, 3)):
            resumed, last = span(out, ranks, rows)
            if last <= resumed:
                break  # the job is over (a kill after its last save committed): nothing left to interrupt
            rank = rng.randrange(ranks)
            # A stop at the last step changes nothing (the job ends there); a kill may hit any save
            # up to the last one: every third step, and the last step, whose save still owes the
            # last epoch's validation.
            draw = rng.random()
            diverge_at = signal_after = None
            # Padding's second sequence starts with a divergence on the step after the first save,
            # whose background write is then still in flight: at least one such case every run.
            forced_divergence = mode == "padding" and n == 1 and not story
            # The first start of sequences 2 and 3 (and packing's 1) is killed in a save: with the
            # phases taken in turn, both modes together kill at every phase in every run.
            forced_kill = not story and (n in (2, 3) or (mode == "packing" and n == 1))
            if forced_divergence:
                draw = 0.45
            elif forced_kill:
                draw = 0.99
            if not epoch_end and draw < 0.2 and not forced_kill:
                # A stop signal to `shardtune run` itself at a random moment from its first millisecond
                # (INT as Ctrl-C, TERM as kill, USR1): the ranks checkpoint at their next step
                # boundary and the run exits 75, or it had finished (exit 0).
                signal_after = (rng.uniform(0.0, 4.0), rng.choice([signal.SIGINT, signal.SIGTERM, signal.SIGUSR1]))
                env = {}
                story.append(f"n={ranks} {signal.Signals(signal_after[1]).name}@{signal_after[0]:.2f}s")
            elif epoch_end or (last - resumed > 1 and draw < 0.4 and not forced_kill):  # 2 stops in 10, 1 divergence, 2 signals: kills have 5 phases
                at = epoch_end or resumed + rng.randint(1, min(6, last - 1 - resumed))
                env = {"SHARDTUNE_TEST_SIGNAL_AT": f"{at}:{rank}"}
                story.append(f"n={ranks} stop@{at}")
            elif draw < 0.5 and last - resumed > 1:
                # A step whose loss is not finite, on one rank: the run stops (exit 3). Half the time
                # the step right after a save, while an asynchronous save may still be in flight.
                after_save = (resumed // EVERY + 1) * EVERY + 1
                at = after_save if after_save <= last and (forced_divergence or rng.random() < 0.5) \
                    else resumed + rng.randint(1, min(6, last - resumed))
                diverge_at = at
                env = {"SHARDTUNE_TEST_NONFINITE_AT": f"{at}:{rank}"}
                story.append(f"n={ranks} diverge@{at}")
            else:
                saves = sorted({s for s in range(resumed + 1, last + 1) if s % EVERY == 0} | {last})
                at = rng.choice(saves[:2])
                # In turn, from a place of the mode's own: packing from the first, padding from the
                # fourth, so that three kills of packing and two of padding cover them all.
                phases = phases or list(reversed(PHASES[offset:] + PHASES[:offset]))
                phase = phases.pop()
                if phase != "files-written":
                    rank = 0  # world rank 0 alone starts and commits a save: no other rank passes those points
                env = {"SHARDTUNE_TEST_KILL_AT": f"{phase}@{at}:{rank}"}
                story.append(f"n={ranks} kill@{phase}@{at}")
            before = resume_point(out)[0]
            rc = start(out, ranks, mode, env, signal_after)
            if rc not in (0, 75) and ("SHARDTUNE_TEST_SIGNAL_AT" in env or signal_after):
                fail(f"{mode}-{n}: a start stopped by a signal exited {rc} (see {out}.log)")
            if signal_after and rc == 75 and resume_point(out)[0] <= before:
                fail(f"{mode}-{n}: a start stopped by {story[-1]} exited 75 without a new checkpoint (see {out}.log)")
            if diverge_at is not None:
                # Every save due before the diverging step is committed, the one in flight too; none after.
                want = max([s for s in range(resumed + 1, diverge_at) if s % EVERY == 0], default=resumed)
                if rc != 3:
                    fail(f"{mode}-{n}: a start whose step {diverge_at} diverged exited {rc}, not 3 (see {out}.log)")
                if resume_point(out)[0] != want:
                    fail(f"{mode}-{n}: after a divergence at step {diverge_at} the newest checkpoint is step "
                         f"{resume_point(out)[0]}, not {want} (see {out}.log)")
            if "SHARDTUNE_TEST_KILL_AT" in env:
                if rc == 0:
                    fail(f"{mode}-{n}: a start to be killed at step {at} finished instead (see {out}.log)")
                killed_at.add(phase)
            if first_batch is None and committed(out):
                first_batch = PER_RANK * ranks
            ranks = rng.randint(1, 4)
            if committed(out) and rng.random() < 0.3:
                # A start over other data (another order, or other samples): refused before training,
                # naming what changed, with the checkpoints and the trained samples as they were.
                change = rng.choice(["train.seed=99", "train.context_length=80"])
                before, seen = resume_point(out), trained(out)
                rc = start(out, ranks, mode, sets=[change])
                story.append(f"n={ranks} {change} refused")
                if rc in (0, 75) or resume_point(out) != before or trained(out) != seen:
                    fail(f"{mode}-{n}: a start with {change} was not refused cleanly (exit {rc}; see {out}.log)")
                elif change.split("=")[0] not in open(os.path.join(out, "logs", "rank-00000.log")).read():
                    fail(f"{mode}-{n}: the refusal does not name {change.split('=')[0]} (see {out}.log)")
        story.append(f"n={ranks} to the end")
        rc = start(out, ranks, mode)
        first_batch = first_batch or PER_RANK * ranks
        say(f"{mode}-{n}: {', '.join(story)}: exit {rc}")
        if rc != 0:
            fail(f"{mode}-{n}: the last start exited {rc} (see {out}.log)")
            continue
        check(f"{mode}-{n} ({', '.join(story)})", out, reference, rows, first_batch)


# The modes share nothing but the data files (each mode caches its own tokens): one thread each.
with concurrent.futures.ThreadPoolExecutor(4) as pool:
    for future in [pool.submit(sequences, mode) for mode in ("packing", "padding", "preference", "mixture")]:
        future.result()
# Every run crashes a save at each of its phases.
if per_mode >= 4 and killed_at != set(PHASES):
    fail(f"the sequences killed a save only at {sorted(killed_at)}, not at each of {PHASES}")

print(f"{len(failures)} failure(s)")
sys.exit(1 if failures else 0)
