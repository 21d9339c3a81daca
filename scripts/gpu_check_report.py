#!/usr/bin/env python3
"""report.md and report.json of scripts/gpu-check.sh, from REPORT_DIR's results.tsv (one row per
check: name, status, seconds, detail), machine.txt, the benchmark's bench.json and bench.md, and
the planner's table. Rewritten after every check, so that a call stopped at its time limit still
leaves the report of what ran. Exit status 1 if any check failed.
usage: gpu_check_report.py REPORT_DIR BUILD_ONLY(0|1)
"""
import datetime, json, os, sys

report, build_only = sys.argv[1], sys.argv[2] == "1"
rows = [l.rstrip("\n").split("\t") for l in open(f"{report}/results.tsv") if l.strip()]
machine = open(f"{report}/machine.txt").read().strip().splitlines()
bench = None
if os.path.exists(f"{report}/bench/bench.json"):
    bench = json.load(open(f"{report}/bench/bench.json"))
checks = [{"name": r[0], "status": r[1], "seconds": int(r[2]), "detail": r[3] if len(r) > 3 else ""} for r in rows]
# The stages of the latest call: done, running, cut short by the call's limit, not reached or not run.
stage_rows = [l.rstrip("\n").split("\t") for l in open(f"{report}/stages.tsv") if l.strip()] \
    if os.path.exists(f"{report}/stages.tsv") else []
stages = [{"name": r[0], "state": r[1], "detail": r[2] if len(r) > 2 else ""} for r in stage_rows]
doc = {"date": datetime.date.today().isoformat(), "machine": machine,
       "seconds": sum(c["seconds"] for c in checks), "checks": checks, "stages": stages, "benchmark": bench}
json.dump(doc, open(f"{report}/report.json", "w"), indent=1)
title = "build environment (--build-only: built, run on the CPU)" if build_only else "GPU check"
lines = [f"# shardtune {title}, {doc['date']}", "", "Machine:", ""] + [f"    {m}" for m in machine] + [
    "", "| check | result | seconds | detail |", "|---|---|---|---|"]
lines += [f"| {c['name']} | {c['status']} | {c['seconds']} | {c['detail']} |" for c in checks]
if stages:
    lines += ["", "| stage | state | detail |", "|---|---|---|"]
    lines += [f"| {s['name']} | {s['state']} | {s['detail']} |" for s in stages]
if bench is not None and os.path.exists(f"{report}/bench/bench.md"):
    lines += ["", open(f"{report}/bench/bench.md").read()]
if os.path.exists(f"{report}/logs/plan_gpu.log"):
    table = [l.rstrip("\n") for l in open(f"{report}/logs/plan_gpu.log") if l.startswith("|")]
    lines += ["", "The planner against the CUDA allocator (bench/plan.sh ... cuda):", ""] + table
open(f"{report}/report.md", "w").write("\n".join(lines) + "\n")
failed = [c["name"] for c in checks if c["status"] == "FAIL"]
short = [s["name"] for s in stages if s["state"] in ("cut short", "not run")]
print(f"gpu-check: {len(checks) - len(failed)} of {len(checks)} checks passed"
      + (f"; failed: {', '.join(failed)}" if failed else "")
      + (f"; cut short or not run: {', '.join(short)}" if short else "") + f"; report in {report}/report.md")
sys.exit(1 if failed else 0)
