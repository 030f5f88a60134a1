"""The stability benchmark: how often the controller acts validly, with each stabilizer on and off.

For a sample of jobs drawn evenly across systems (seeded), every configuration runs on every job, the
configurations of one job side by side, so timing noise falls evenly on all of them. Per configuration:
Pass Rate (runs that end with a valid finalize within the step limit), Invalid Rate (invalid steps / all
steps), mean steps, median wall time, plus the share of steps JsonRegen repaired, finalizes with no tool
call before them, repeated tool calls, what the handlers rejected, and PR@1/RR by the evaluation's scorer
where labels sit beside the jobs. `--experts --ablate experts` compares runs with and without the expert
tools the same way. The model-call cache is off, so every configuration really calls the model.
"""
from __future__ import annotations

import dataclasses
import json
import statistics
from collections import Counter
from pathlib import Path
from typing import Callable

from rcagent.config import Settings
from rcagent.discovery import find_jobs, sample
from rcagent.errors import BackendError, BadInput
from rcagent.eval.labels import labels_dir
from rcagent.tables import pct, render_table

ABLATIONS = {
    "constrain": {"constrain": False},
    "jsonregen": {"jsonregen": False},
    "handlers": {"handlers": False},
    "limits": {"schema_limits": False},   # handlers as checks only: the model may make the mistake first
    "all": {"constrain": False, "jsonregen": False, "handlers": False},
    "experts": {"experts": False},        # meaningful with --experts: the same runs without the expert tools
}


def configurations(ablate: str) -> dict[str, dict]:
    """'full' first, then one configuration per ablated stabilizer ('all' turns every one off)."""
    names = [n.strip() for n in ablate.split(",") if n.strip()]
    unknown = [n for n in names if n not in ABLATIONS]
    if unknown:
        raise BadInput(f"--ablate: unknown stabilizer(s) {', '.join(unknown)} (choose from {', '.join(ABLATIONS)})")
    return {"full": {}, **{("plain" if n == "all" else f"no-{n}"): ABLATIONS[n] for n in dict.fromkeys(names)}}


def one_run(job_dir: Path, backend, store, settings: Settings) -> dict:
    from rcagent.controller import Controller
    from rcagent.job import Job

    job = Job.load(job_dir)
    controller = Controller(job, backend, store, settings)
    base = {"job": job.id, "system": job.system, "job_path": str(job_dir)}
    try:
        d = controller.run()
    except BackendError as exc:  # e.g. the context window overflowed: the run failed, the bench goes on
        return {**base, "passed": False, "finalized": False, "steps": controller.trajectory.step,
                "invalid_steps": controller.trajectory.invalid + 1, "repaired_steps": controller.trajectory.repaired, "wall_s": None,
                "llm_calls": controller.model.llm_calls,
                "error": str(exc), "run_id": controller.run_id, "handlers": {}, "blind_finalize": False,
                "tool_calls": 0, "repeated_calls": 0, "answer": []}
    steps = store.steps(d.run_id)
    calls = [(s["action"], s["arguments"]) for s in steps if s["valid"] and s["action"] != "finalize"]
    # paging through a snapshot (read_snapshot with the same key) is not a repeat
    tool_calls = [c for c in calls if c[0] != "read_snapshot"]
    repeated = len(tool_calls) - len(set(tool_calls))
    return {**base, "run_id": d.run_id,
            "passed": d.finalized and d.steps <= settings.max_steps, "finalized": d.finalized,
            "steps": d.steps, "invalid_steps": d.invalid_steps, "repaired_steps": d.repaired_steps,
            "wall_s": d.wall_s, "llm_calls": d.llm_calls,
            "handlers": dict(Counter(s["handler"] for s in steps if s["handler"])),
            "blind_finalize": d.finalized and not calls, "tool_calls": len(tool_calls), "repeated_calls": repeated,
            "answer": [rc.entity for rc in d.root_causes]}


def summarize(name: str, overrides: dict, runs: list[dict], labels: Path) -> dict:
    steps = sum(r["steps"] for r in runs)
    walls = [r["wall_s"] for r in runs if r["wall_s"] is not None]
    tool_calls = sum(r["tool_calls"] for r in runs)
    handled: Counter = Counter()
    for r in runs:
        handled.update(r["handlers"])
    scored = accuracy(runs, labels)
    return {
        "config": name, "settings": overrides, "runs": len(runs),
        "pass_rate": round(sum(r["passed"] for r in runs) / len(runs), 4) if runs else 0.0,
        "invalid_rate": round(sum(r["invalid_steps"] for r in runs) / steps, 4) if steps else 0.0,
        "mean_steps": round(steps / len(runs), 2) if runs else 0.0,
        "median_wall_s": round(statistics.median(walls), 2) if walls else None,
        "repaired_rate": round(sum(r["repaired_steps"] for r in runs) / steps, 4) if steps else 0.0,
        "blind_finalize": sum(r["blind_finalize"] for r in runs),
        "repeated_call_rate": round(sum(r["repeated_calls"] for r in runs) / tool_calls, 4) if tool_calls else 0.0,
        "handled": dict(handled.most_common()),
        **scored,
        "per_job": runs,
    }


def accuracy(runs: list[dict], labels: Path) -> dict:
    """PR@1 and RR (RCAtlas, as `rcagent eval` scores them) over the runs whose job has a label."""
    from rcagent.eval.evaluate import score_rows

    if not labels.is_dir():
        return {"scored": 0, "pr1": None, "rr": None}
    rows = [{"job": r["job"], "job_path": r["job_path"], "method": "run",
             "root_causes": [{"entity": e} for e in r["answer"]]} for r in runs]
    cases, _ = score_rows(rows, labels, None)
    if not cases:
        return {"scored": 0, "pr1": None, "rr": None}
    return {"scored": len(cases), "pr1": round(sum(c["pr1"] for c in cases) / len(cases), 4),
            "rr": round(sum(c["rr"] for c in cases) / len(cases), 4)}


def run_benchmark(jobs_folder: Path, base: Settings, ablate: str, limit: int, seed: int, store,
                  progress: Callable[[str], None] = lambda line: None) -> tuple[list[Path], list[dict]]:
    from rcagent.serving import make_backend

    configs = configurations(ablate)
    jobs = sample(find_jobs(jobs_folder), limit, seed)
    backend = make_backend(base)
    runs: dict[str, list[dict]] = {name: [] for name in configs}
    total, done = len(jobs) * len(configs), 0
    for job_dir in jobs:
        for name, overrides in configs.items():
            settings = dataclasses.replace(base, cache=False, **overrides)
            result = one_run(job_dir, backend, store, settings)
            runs[name].append(result)
            done += 1
            progress(f"[{done}/{total}] {name:<13} {result['job']:<14} "
                     f"{'pass' if result['passed'] else 'FAIL'}  {result['steps']:>2} steps  "
                     f"{result['invalid_steps']:>2} invalid  {result['wall_s'] or 0:.1f} s")
    labels = labels_dir(jobs[0].parent)
    return jobs, [summarize(name, configs[name], runs[name], labels) for name in configs]


def table(results: list[dict], fmt: str = "text") -> str:
    head = ["config", "runs", "pass rate", "invalid rate", "mean steps", "median wall s", "repaired",
            "blind finalize", "repeated calls", "PR@1", "RR"]
    rows = [[r["config"], str(r["runs"]), f"{r['pass_rate']:.0%}", f"{r['invalid_rate']:.1%}", f"{r['mean_steps']:.1f}",
             f"{r['median_wall_s']}", f"{r['repaired_rate']:.1%}", str(r["blind_finalize"]),
             f"{r['repeated_call_rate']:.1%}", pct(r.get("pr1")), pct(r.get("rr"))] for r in results]
    return render_table(head, rows, fmt)


def write(results: list[dict], jobs: list[Path], seed: int, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps([{**r, "sample": [j.name for j in jobs], "seed": seed} for r in results], indent=2))
