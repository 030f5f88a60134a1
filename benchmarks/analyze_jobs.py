"""Run `rcagent analyze` (default local model) on every job matching a pattern and summarise.

    python benchmarks/analyze_jobs.py --jobs ~/.cache/rcagent/work --pattern 'tt-*' --out results/tt.jsonl

Each job runs in its own process through the real CLI; the summary reports how many finished, how many
finalized within the step limit, whether every reported root cause is an entity of the job, steps,
invalid steps and wall time (median), and -- for information only -- top-1/top-3 hits against the labels.
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq

from rcagent.eval.labels import lenient_truth, load_label


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", required=True, help="folder holding jobs/ and labels/ (an import's DEST)")
    ap.add_argument("--pattern", default="tt-*")
    ap.add_argument("--out", required=True)
    ap.add_argument("--store", default=None)
    ap.add_argument("extra", nargs="*", help="more arguments for rcagent analyze")
    args = ap.parse_args()
    root = Path(args.jobs).expanduser()
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    done = {json.loads(l)["job"] for l in out.read_text().splitlines()} if out.exists() else set()
    jobs = sorted((root / "jobs").glob(args.pattern))
    for i, job in enumerate(jobs):
        if job.name in done:
            continue
        tmp = out.with_suffix(".one.json")
        cmd = [sys.executable, "-c", "from rcagent.cli import main; main()", "analyze", "--job", str(job),
               "--out", str(tmp), "--quiet", *(["--store", args.store] if args.store else []), *args.extra]
        t = time.perf_counter()
        r = subprocess.run(cmd, capture_output=True, text=True)
        wall = time.perf_counter() - t
        if r.returncode != 0:
            record = {"job": job.name, "error": r.stderr.strip()[-300:], "exit": r.returncode}
        else:
            record = json.loads(tmp.read_text())
            record["process_s"] = round(wall, 2)
        with out.open("a") as fh:
            fh.write(json.dumps(record) + "\n")
        print(f"{i + 1}/{len(jobs)} {job.name} exit={r.returncode} {wall:.0f}s", flush=True)
    summarise(root, out)


def summarise(root: Path, out: Path) -> None:
    rows = [json.loads(l) for l in out.read_text().splitlines()]
    ok = [r for r in rows if "error" not in r]
    in_inventory = 0
    top1 = top3 = 0
    for r in ok:
        ents = set(pq.read_table(root / "jobs" / r["job"] / "entities.parquet").column("id").to_pylist())
        in_inventory += all(c["entity"] in ents for c in r["root_causes"]) and bool(r["root_causes"])
        truth = lenient_truth(load_label(root / "labels", r["job"]))
        names = [c["entity"] for c in r["root_causes"]]
        top1 += bool(names) and names[0] in truth
        top3 += any(n in truth for n in names[:3])
    med = lambda k: statistics.median(r[k] for r in ok) if ok else float("nan")
    summary = {
        "jobs": len(rows), "finished": len(ok), "finalized": sum(r["finalized"] for r in ok),
        "root_causes_in_inventory": in_inventory, "median_steps": med("steps"),
        "invalid_steps": sum(r["invalid_steps"] for r in ok), "all_steps": sum(r["steps"] for r in ok),
        "median_wall_s": med("wall_s"), "median_process_s": med("process_s"),
        "top1_hits (pod or its service)": top1, "top3_hits": top3,
    }
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
