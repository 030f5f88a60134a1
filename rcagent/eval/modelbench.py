"""`rcagent bench models`: what the model adds, per method and model, on one fixed sample of jobs.

Every method (react, oneshot, sql, span, graph and graph's ablations) runs with every model on the same seeded sample drawn evenly across
the systems, through `Batch` (one JSONL file per method and model in the output folder: rerunning resumes).
The evidence ranking alone (the overview), NSigma, BARO and random run on the same jobs in the same run.
Per method and model the table gives PR@1/RR of the model's own answer (its picks before fusion; a run that
never answered scores 0), of the fused answer, and of the ranking alone on the same jobs; Pass Rate and
Invalid Rate; model calls, tokens and the median time per case.
"""
from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Callable

from rcagent.batch import Batch, job_ids, prepare_output, read_results
from rcagent.discovery import find_jobs, sample
from rcagent.eval.evaluate import score_rows, summarize
from rcagent.tables import pct, render_table

BASELINES = ("overview", "nsigma", "baro", "random")
METHODS = ("react", "oneshot", "sql", "span", "graph")
# graph mode's ablations (GAMA §6): a method name of its own, run as graph mode with one setting changed
VARIANTS = {"graph-noverifier": {"graph_verifier": False}, "graph-nobacktrack": {"graph_backtrack": False},
            "graph-randomnav": {"graph_navigator": "random"}, "graph-nochallenge": {"graph_challenge": False}}


def slug(model: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", Path(model).stem if model.endswith(".gguf") else model)


def result_file(out: Path, method: str, model: str | None = None) -> Path:
    return out / (f"{method}-{slug(model)}.jsonl" if model else f"{method}.jsonl")


def run(jobs_dir: Path, out: Path, settings, models: list[str], methods: list[str], n: int, seed: int,
        timeout: float | None, progress: Callable[[str], None] = lambda line: None,
        report_only: bool = False) -> list[Path]:
    """Run what is missing of the benchmark (nothing with `report_only`); returns the sample's job folders."""
    from rcagent.serving import make_backend

    jobs = sample(find_jobs(jobs_dir), n, seed)
    if report_only:
        return jobs
    out.mkdir(parents=True, exist_ok=True)
    settings = dataclasses.replace(settings, store=str(out / "runs.db"))
    for method in BASELINES:
        _run(jobs, result_file(out, method), method, settings, None, timeout, seed, progress)
    for model in models:
        s = dataclasses.replace(settings, model=model)
        backend = None
        for method in methods:
            path = result_file(out, method, model)
            if backend is None and _todo(jobs, path):
                backend = make_backend(s)        # loaded once per model, only when something is left to run
            _run(jobs, path, method, s, backend, timeout, seed, progress)
    return jobs


def _todo(jobs: list[Path], path: Path) -> list[Path]:
    done = {r["job"] for r in read_results(path) if r.get("status") != "error"} if path.is_file() else set()
    ids = job_ids(jobs)
    return [j for j in jobs if ids[j] not in done]


def _run(jobs, path, method, settings, backend, timeout, seed, progress) -> None:
    prepare_output(path, resume=True)     # drops broken lines and errored jobs, which run again
    todo = _todo(jobs, path)
    if not todo:
        return
    if method in VARIANTS:
        settings, method = dataclasses.replace(settings, **VARIANTS[method]), "graph"
    progress(f"{path.name}: {len(todo)} of {len(jobs)} jobs to run")
    Batch(todo, path, method, settings, timeout=timeout, seed=seed, backend=backend, ids=job_ids(todo),
          on_done=lambda o: progress(f"  {path.stem} {o.job}: {o.status} {o.wall_s:.0f} s")).run()


def own_answers(rows: list[dict]) -> list[dict]:
    """The rows with the model's own picks as the answer (no fusion with the evidence ranking)."""
    return [{**r, "root_causes": [{"entity": e} for e in r.get("model_root_causes") or []]} for r in rows]


def table_rows(out: Path, jobs: list[Path], models: list[str], methods: list[str], labels: Path) -> list[dict]:
    names = set(job_ids(jobs).values())
    jobs_dir = jobs[0].parent if jobs else None

    def cases(rows):
        return {c["job"]: c for c in score_rows([r for r in rows if r["job"] in names], labels, jobs_dir)[0]}
    ranking = cases(read_results(result_file(out, "overview")))
    rows = []
    for method in methods:
        for model in models:
            path = result_file(out, method, model)
            results = read_results(path) if path.is_file() else []
            if not results:
                continue
            fused, own = cases(results), cases(own_answers(results))
            same = sorted(set(fused) & set(ranking))
            f, o, r = (summarize([by_job[j] for j in same]) for by_job in (fused, own, ranking))
            rows.append({"method": method, "model": model, "cases": len(same),
                         "own_pr1": o["pr1"], "own_rr": o["rr"], "fused_pr1": f["pr1"], "fused_rr": f["rr"],
                         "ranking_pr1": r["pr1"], "ranking_rr": r["rr"],
                         "pass_rate": f["pass_rate"], "invalid_rate": f["invalid_rate"],
                         "llm_calls": f["llm_calls"], "tokens": f["tokens"], "median_wall_s": f["median_wall_s"]})
    return rows


def baseline_rows(out: Path, jobs: list[Path], labels: Path) -> list[dict]:
    names = set(job_ids(jobs).values())
    rows = []
    for method in BASELINES:
        path = result_file(out, method)
        results = [r for r in read_results(path) if r["job"] in names] if path.is_file() else []
        cases = score_rows(results, labels, jobs[0].parent if jobs else None)[0]
        s = summarize(cases)
        rows.append({"method": method, "cases": s["cases"], "pr1": s["pr1"], "rr": s["rr"]})
    return rows


def table(rows: list[dict], baselines: list[dict], fmt: str = "text") -> str:
    head = ["method", "model", "cases", "own PR@1", "own RR", "fused PR@1", "fused RR", "ranking PR@1",
            "ranking RR", "Pass", "Invalid", "calls", "tokens", "median s"]
    body = [[r["method"], r["model"], r["cases"], pct(r["own_pr1"]), pct(r["own_rr"]), pct(r["fused_pr1"]),
             pct(r["fused_rr"]), pct(r["ranking_pr1"]), pct(r["ranking_rr"]), pct(r["pass_rate"]),
             pct(r["invalid_rate"]), _num(r["llm_calls"]), _num(r["tokens"]), _num(r["median_wall_s"])]
            for r in rows]
    base = render_table(["baseline (same jobs)", "cases", "PR@1", "RR"],
                        [[b["method"], b["cases"], pct(b["pr1"]), pct(b["rr"])] for b in baselines], fmt)
    return render_table(head, body, fmt) + "\n\n" + base


def _num(x) -> str:
    return "-" if x is None else f"{x:.0f}" if x >= 10 else f"{x:.1f}"

