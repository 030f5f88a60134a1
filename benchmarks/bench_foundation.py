"""Foundation benchmark on the largest shared jobs: job load, each tool's latency, controller overhead, memory.

Two jobs are measured: the largest job overall (by bytes on disk) and the largest job that has every
kind of telemetry with a baseline (metrics, traces, logs: a TrainTicket job), since a job without
baseline traces or logs skips most of the tools' work.

    python benchmarks/bench_foundation.py --data ../shared/data [--repeat 15]

- load: median of Job.load over --repeat loads (a fresh DuckDB each time);
- tools: median latency of each information tool on the job's most anomalous service (each call on a
  freshly loaded job, so derived tables are rebuilt and not served from a warm cache);
- controller overhead per step, model time excluded: a scripted run (the backend answers instantly) of
  N tool steps; (wall - tool time) / steps;
- peak memory (max RSS) of a whole `rcagent analyze` with the default local model, in a child process.
Goals (issue 2): load <= 2 s, every tool <= 0.5 s median, overhead <= 50 ms a step, peak <= 2 GiB.
"""
from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rcagent.config import Settings
from rcagent.controller import Controller
from rcagent.importers import run_import
from rcagent.job import Job
from rcagent.serving.scripted import ScriptedBackend
from rcagent.store import Store
from rcagent.tools import load_builtin_tools, run_tool
from rcagent.tools.overview import ranking

ARCHIVES = [("nezha", "nezha-trainticket-2023-01-29.tar.xz"), ("nezha", "nezha-onlineboutique-2022-08-22.tar.xz"),
            ("rcd", "rcd-sockshop.tar.xz"), ("petshop", "petshop.tar.xz")]


def folder_size(p: Path) -> int:
    return sum(f.stat().st_size for f in p.iterdir())


def timed(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default="../shared/data")
    ap.add_argument("--work", default=None, help="an import DEST to reuse (default: import into a temp folder)")
    ap.add_argument("--repeat", type=int, default=15)
    ap.add_argument("--skip-model", action="store_true")
    args = ap.parse_args()
    work = Path(args.work) if args.work else Path(tempfile.mkdtemp())
    if not args.work:
        for kind, archive in ARCHIVES:
            run_import(kind, Path(args.data) / archive, work)
    jobs = sorted((work / "jobs").iterdir(), key=folder_size, reverse=True)
    complete = [j for j in jobs if all((j / f"{t}.parquet").exists() for t in ("metrics", "traces", "logs"))]
    results = [measure(jobs[0], args.repeat)]
    if complete and complete[0] != jobs[0]:
        results.append(measure(complete[0], args.repeat))
    if not args.skip_model:  # a whole analyze with the local model, on the job with every table
        results[-1].update(peak_memory(Path(results[-1]["path"])))
    for result in results:
        print(json.dumps(result, indent=2))
        goals = {"load_s <= 2": result["load_s"] <= 2,
                 "every tool <= 0.5 s": max(result["tools_s"].values()) <= 0.5,
                 "overhead <= 50 ms/step": result["controller_overhead_s_per_step"] <= 0.05}
        if "analyze_peak_rss_mib" in result:
            goals["peak <= 2 GiB"] = result["analyze_peak_rss_mib"] <= 2048
        print("goals:", json.dumps(goals))


def measure(largest: Path, repeat: int) -> dict:
    job = Job.load(largest)
    print(f"job: {largest.name} ({folder_size(largest) / 1e6:.1f} MB; rows {job.rows})")
    result = {"job": largest.name, "path": str(largest), "bytes": folder_size(largest), "rows": job.rows}
    result["load_s"] = timed(lambda: Job.load(largest), repeat)
    tools = load_builtin_tools()
    target = ranking(job, "service")[0][0]
    result["tool_entity"] = target
    result["tools_s"] = {}
    for name, tool in tools.items():
        params = {} if name == "overview" else {"entity": target}
        it = iter([Job.load(largest) for _ in range(repeat)])
        result["tools_s"][name] = timed(lambda: run_tool(tool, next(it), params), repeat)

    # controller overhead: scripted answers are instant, so wall - tool time is the controller's own time
    steps = [json.dumps({"thought": "t", "action": n, "arguments": {"entity": target} if n != "overview" else {}})
             for n in ("metrics", "logs", "calls", "topology", "events", "overview")] * 2
    final = json.dumps({"thought": "t", "action": "finalize", "arguments": {
        "root_causes": [target], "root_cause": "x", "solution": "y", "evidence": ["z"], "responsibility": "r"}})
    with tempfile.TemporaryDirectory() as tmp:
        store = Store(Path(tmp) / "s.db")
        settings = Settings(backend="scripted", max_steps=20)
        overheads = []
        for _ in range(5):
            c = Controller(Job.load(largest), ScriptedBackend(steps + [final]), store, settings)
            t = time.perf_counter()
            d = c.run()
            wall = time.perf_counter() - t
            tool_s = sum((s["tool_ms"] or 0) for s in store.steps(d.run_id)) / 1000
            overheads.append((wall - tool_s) / d.steps)
        result["controller_overhead_s_per_step"] = statistics.median(overheads)
    return result


def peak_memory(job_dir: Path) -> dict:
    """Max RSS of a whole `rcagent analyze` with the default local model, run as a child process."""
    with tempfile.TemporaryDirectory() as tmp:
        t = time.perf_counter()
        r = subprocess.run([sys.executable, "-c", "from rcagent.cli import main; main()", "analyze", "--job",
                            str(job_dir), "--quiet", "--format", "json", "--store", str(Path(tmp) / "s.db")],
                           capture_output=True, text=True)
        out = json.loads(r.stdout) if r.returncode == 0 else {}
        return {"analyze_exit": r.returncode, "analyze_wall_s": time.perf_counter() - t,
                "analyze_steps": out.get("steps"),
                "analyze_peak_rss_mib": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024}


if __name__ == "__main__":
    main()
