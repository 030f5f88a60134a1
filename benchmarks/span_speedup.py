"""Speed-up of span mode from parallel agents: pool K against the same agents one at a time (K = 1).

    python benchmarks/span_speedup.py --jobs ~/.cache/rcagent/work --pattern 'tt-*' --pool 4 --delay 0.2 \
        --out span-speedup-scripted.json
    python benchmarks/span_speedup.py --jobs ~/.cache/rcagent/work --pattern 'tt-*' --pool 4 \
        --backend openai --base-url http://127.0.0.1:PORT/v1 --model smollm2 --out span-speedup-server.json

For each job, side by side in one process: span mode with K = 1, then with K = --pool, on the same
request and tree. With the default `--backend rules`, a deterministic model answers every call after a
fixed `--delay` (a served model's latency, without its compute); with `--backend openai`, a real
OpenAI-compatible server on loopback answers. Reported: wall seconds per job for both and their ratio
(K=1 / K=pool), median over the jobs, plus the agents' count and the peak number active.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import time
from pathlib import Path

from rcagent.config import load_settings
from rcagent.job import Job
from rcagent.serving import make_backend
from rcagent.serving.scripted import RuleBackend
from rcagent.spans.mode import analyze
from rcagent.spans.rules import span_rules
from rcagent.store import Store


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=Path, required=True)
    ap.add_argument("--pattern", default="tt-*")
    ap.add_argument("--limit", type=int, default=0, help="at most this many jobs (0: all that match)")
    ap.add_argument("--pool", type=int, default=4)
    ap.add_argument("--delay", type=float, default=0.2)
    ap.add_argument("--backend", default="rules")
    ap.add_argument("--model")
    ap.add_argument("--base-url")
    ap.add_argument("--store", default="span-speedup.db")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()

    folder = args.jobs / "jobs" if (args.jobs / "jobs").is_dir() else args.jobs
    jobs = sorted(p for p in folder.glob(args.pattern) if (p / "job.yaml").is_file())
    jobs = jobs[: args.limit] if args.limit else jobs
    if args.backend == "rules":
        base = load_settings(None, backend="scripted", cache=False)
        backend = RuleBackend(span_rules(), delay=args.delay)
    else:
        base = load_settings(None, backend=args.backend, model=args.model, base_url=args.base_url, cache=False)
        backend = make_backend(base)
    store = Store(args.store)
    rows = []
    for job_dir in jobs:
        job = Job.load(job_dir)
        row = {"job": job.id}
        for k in (1, args.pool):
            start = time.perf_counter()
            d = analyze(job, backend, store, dataclasses.replace(base, span_pool=k))
            row[f"k{k}"] = {"wall_s": round(time.perf_counter() - start, 3), "agents": d.span.get("spans"),
                            "max_active": d.span.get("max_active"), "calls": d.llm_calls}
        job.con.close()
        row["speedup"] = round(row["k1"]["wall_s"] / row[f"k{args.pool}"]["wall_s"], 3)
        rows.append(row)
        print(f"{job.id}: {row['k1']['agents']} agents, K=1 {row['k1']['wall_s']:.1f} s, K={args.pool} "
              f"{row[f'k{args.pool}']['wall_s']:.1f} s, speed-up {row['speedup']:.2f}x", file=sys.stderr)
    summary = {"backend": backend.name, "model": backend.model,
               "delay_s": args.delay if args.backend == "rules" else None, "pool": args.pool, "jobs": rows, "median_speedup": statistics.median(r["speedup"] for r in rows),
               "median_agents": statistics.median(r["k1"]["agents"] for r in rows)}
    args.out.write_text(json.dumps(summary, indent=2))
    print(f"median speed-up K={args.pool} over K=1: {summary['median_speedup']:.2f}x "
          f"({len(rows)} jobs, median {summary['median_agents']} agents)", file=sys.stderr)


if __name__ == "__main__":
    main()
