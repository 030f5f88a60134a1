"""Throughput of `rcagent batch --engine ray` against the local engine, side by side in one run: the same
baseline over the same jobs, in turn the local engine with one thread, the local engine and Ray with the
same concurrency, `--rounds` times; prints each run's jobs per second, the medians, the ratios of Ray to
each local run, and whether the answers are identical.

    python benchmarks/ray_throughput.py [--jobs DIR] [--method nsigma] [--concurrency 2] [--rounds 3]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

RCAGENT = [sys.executable, "-c", "from rcagent.cli import main; main()"]


def run(engine: str, jobs: Path, method: str, concurrency: int, out: Path) -> float:
    start = time.perf_counter()
    subprocess.run([*RCAGENT, "batch", "--jobs", str(jobs), "--out", str(out), "--method", method, "--engine", engine,
                    "--concurrency", str(concurrency), "--quiet"], check=True, capture_output=True,
                   env={**os.environ, "RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0"})
    return time.perf_counter() - start


def answers(path: Path) -> dict:
    return {r["job"]: [c["entity"] for c in r["root_causes"]] for r in map(json.loads, path.read_text().splitlines())}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=Path, default=Path("~/.cache/rcagent/work/jobs").expanduser())
    ap.add_argument("--method", default="nsigma")
    ap.add_argument("--concurrency", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    n = sum(1 for p in a.jobs.iterdir() if (p / "job.yaml").is_file())
    runs = [("local, 1 thread", "local", 1), (f"local, {a.concurrency} threads", "local", a.concurrency),
            (f"ray, {a.concurrency} CPUs", "ray", a.concurrency)]
    rates: dict[str, list[float]] = {name: [] for name, _, _ in runs}
    with tempfile.TemporaryDirectory() as tmp:
        outs = {}
        for i in range(a.rounds):
            for name, engine, concurrency in runs:
                out = Path(tmp) / f"{engine}-{concurrency}-{i}.jsonl"
                seconds = run(engine, a.jobs, a.method, concurrency, out)
                rates[name].append(n / seconds)
                outs[name] = answers(out)
                print(f"round {i + 1} {name}: {n} jobs in {seconds:.1f} s ({n / seconds:.2f} jobs/s)", flush=True)
    medians = {name: statistics.median(r) for name, r in rates.items()}
    on_ray = medians[runs[2][0]]
    print("median jobs/s: " + ", ".join(f"{name} {m:.2f}" for name, m in medians.items()))
    print(f"ray/local: {on_ray / medians[runs[0][0]]:.2f} against one thread, {on_ray / medians[runs[1][0]]:.2f} "
          f"against {a.concurrency} threads; answers identical: {len({json.dumps(o, sort_keys=True) for o in outs.values()}) == 1}")


if __name__ == "__main__":
    main()
