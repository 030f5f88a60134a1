"""Throughput of `rcagent batch --engine ray` against the local engine, side by side in one run: the same
baseline over the same jobs, alternating local and Ray `ROUNDS` times, each with the same concurrency;
prints each run's jobs per second, the medians and their ratio, and whether the answers are identical.

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
    rates: dict[str, list[float]] = {"local": [], "ray": []}
    with tempfile.TemporaryDirectory() as tmp:
        outs = {}
        for i in range(a.rounds):
            for engine in ("local", "ray"):
                out = Path(tmp) / f"{engine}-{i}.jsonl"
                seconds = run(engine, a.jobs, a.method, a.concurrency, out)
                rates[engine].append(n / seconds)
                outs[engine] = out
                print(f"round {i + 1} {engine}: {n} jobs in {seconds:.1f} s ({n / seconds:.2f} jobs/s)", flush=True)
        same = answers(outs["local"]) == answers(outs["ray"])
    local, on_ray = statistics.median(rates["local"]), statistics.median(rates["ray"])
    print(f"median jobs/s: local {local:.2f}, ray {on_ray:.2f}; ray/local {on_ray / local:.2f}; "
          f"answers identical: {same}")


if __name__ == "__main__":
    main()
