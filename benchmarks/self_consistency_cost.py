"""Cost of self-consistency at finalization against N full independent trajectories, side by side.

    python benchmarks/self_consistency_cost.py --jobs ~/.cache/rcagent/work --limit 4 --samples 10 \
        --out sc-cost.json [--backend openai --base-url http://127.0.0.1:8080/v1 --model NAME]

For each job of the seeded sample (drawn evenly across systems), in one process, one after the other:
  sc:          one greedy run that samples `--samples` finalizations from its last prefix (rcagent's way);
  independent: `--samples` full trajectories at the sampling temperature, each with its own seed (the
               naive way: every tool step is taken again).
Reported per job and as medians: model calls, tokens (prompt + completion as the backend reports them;
llama.cpp reports the whole prompt even when its KV cache served it, so the wall time shows the cache)
and wall seconds, plus the ratio independent / sc. The model-call cache is off for both.
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
from rcagent.controller import Controller
from rcagent.job import Job
from rcagent.serving import make_backend
from rcagent.discovery import find_jobs, sample
from rcagent.store import Store


def measure(job_dir: Path, backend, store: Store, settings) -> dict:
    job = Job.load(job_dir)
    start = time.perf_counter()
    d = Controller(job, backend, store, settings).run()
    job.con.close()
    return {"wall_s": time.perf_counter() - start, "llm_calls": d.llm_calls,
            "tokens": d.prompt_tokens + d.completion_tokens, "steps": d.steps, "finalized": d.finalized,
            "first": d.root_causes[0].entity if d.root_causes else None, "consistency": d.consistency}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=Path, required=True)
    ap.add_argument("--limit", type=int, default=4)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--samples", type=int, default=10)
    ap.add_argument("--backend", default="local")
    ap.add_argument("--model")
    ap.add_argument("--base-url")
    ap.add_argument("--store", default="sc-cost.db")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()

    base = load_settings(None, backend=args.backend, model=args.model, base_url=args.base_url, cache=False)
    backend = make_backend(base)
    store = Store(args.store)
    sc_settings = dataclasses.replace(base, samples=args.samples, aggregate="embed")
    rows = []
    for job_dir in sample(find_jobs(args.jobs), args.limit, args.seed):
        sc = measure(job_dir, backend, store, sc_settings)
        runs = []
        for k in range(args.samples):
            backend.seed = base.seed + 1000 * (k + 1)      # each trajectory its own sampling seed
            runs.append(measure(job_dir, backend, store,
                                dataclasses.replace(base, temperature=base.sample_temperature)))
        backend.seed = base.seed
        ind = {key: sum(r[key] for r in runs) for key in ("wall_s", "llm_calls", "tokens")}
        row = {"job": job_dir.name, "sc": sc, "independent": ind,
               "independent_firsts": [r["first"] for r in runs],
               "ratio": {key: round(ind[key] / sc[key], 2) if sc[key] else None for key in ind}}
        rows.append(row)
        print(f"{job_dir.name}: sc {sc['wall_s']:.0f} s, {sc['llm_calls']} calls, {sc['tokens']} tokens | "
              f"independent {ind['wall_s']:.0f} s, {ind['llm_calls']} calls, {ind['tokens']} tokens | "
              f"ratio {row['ratio']}", file=sys.stderr)
    medians = {key: statistics.median(r["ratio"][key] for r in rows) for key in ("wall_s", "llm_calls", "tokens")}
    args.out.write_text(json.dumps({"samples": args.samples, "backend": backend.name, "model": backend.model,
                                    "jobs": rows, "median_ratio": medians}, indent=2))
    print(f"median ratio independent / sc: {medians}", file=sys.stderr)


if __name__ == "__main__":
    main()
