"""The results of a `rcagent bench stability` run that was stopped before its end, rebuilt from its store:
the jobs that finished in every configuration, scored as the benchmark scores them.

    python benchmarks/stability_from_store.py ~/.cache/rcagent/bench/stability-....db out.json \
        --ablate handlers,limits [--jobs 12]
"""
from __future__ import annotations

import argparse
import json
import sqlite3
from collections import Counter
from pathlib import Path

from rcagent.eval.labels import labels_dir
from rcagent.eval.stability import ABLATIONS, configurations, summarize


def config_of(settings: dict, configs: dict[str, dict]) -> str | None:
    for name, overrides in configs.items():
        switches = {k: True for o in configs.values() for k in o}   # the switches are on by default
        switches.update(overrides)
        if all(settings.get(k, True) == v for k, v in switches.items()):
            return name
    return None


def run_record(con, run: sqlite3.Row, max_steps: int) -> dict:
    """What one_run() returns for a run, from the stored run and its steps."""
    steps = [dict(s) for s in con.execute("SELECT * FROM steps WHERE run_id = ? ORDER BY step", [run["id"]])]
    d = json.loads(run["diagnosis"]) if run["diagnosis"] else {}
    calls = [(s["action"], s["arguments"]) for s in steps if s["valid"] and s["action"] != "finalize"]
    tool_calls = [c for c in calls if c[0] != "read_snapshot"]
    return {"job": run["job"], "job_path": run["job_path"], "run_id": run["id"],
            "passed": bool(d.get("finalized")) and d.get("steps", max_steps + 1) <= max_steps,
            "finalized": bool(d.get("finalized")), "steps": d.get("steps", len(steps)),
            "invalid_steps": d.get("invalid_steps", 0), "repaired_steps": d.get("repaired_steps", 0),
            "wall_s": d.get("wall_s"), "llm_calls": d.get("llm_calls", 0),
            "handlers": dict(Counter(s["handler"] for s in steps if s["handler"])),
            "blind_finalize": bool(d.get("finalized")) and not calls, "tool_calls": len(tool_calls),
            "repeated_calls": len(tool_calls) - len(set(tool_calls)),
            "answer": [rc["entity"] for rc in d.get("root_causes", [])]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("store", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument("--ablate", required=True, help=f"as given to the benchmark ({', '.join(ABLATIONS)})")
    ap.add_argument("--jobs", type=int, help="at most this many jobs, in the order they ran")
    args = ap.parse_args()
    configs = configurations(args.ablate)
    con = sqlite3.connect(args.store)
    con.row_factory = sqlite3.Row
    runs: dict[str, dict[str, dict]] = {}
    for run in con.execute("SELECT * FROM runs WHERE status IN ('finalized', 'step_limit') ORDER BY started"):
        settings = json.loads(run["settings"])
        name = config_of(settings, configs)
        if name:
            runs.setdefault(run["job"], {})[name] = run_record(con, run, settings["max_steps"])
    done = [job for job, by_config in runs.items() if set(by_config) == set(configs)][:args.jobs]
    if not done:
        raise SystemExit("no job finished in every configuration")
    labels = labels_dir(Path(runs[done[0]]["full"]["job_path"]).parent)
    results = [summarize(n, configs[n], [runs[j][n] for j in done], labels) for n in configs]
    args.out.write_text(json.dumps([{**r, "sample": done, "seed": None} for r in results], indent=2))
    print(f"{len(done)} jobs: {' '.join(done)}")


if __name__ == "__main__":
    main()
