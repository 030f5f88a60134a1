"""Offline evaluation of batch results against the importers' labels.

Per case: localization (scoring.py), efficiency (wall time, model calls, tokens), stability (finalized,
invalid steps), and, when asked, text scores and judge scores added by textmetrics.py and judge.py. Cases
are grouped by method (one results file may hold one method or several) and by the `--by` keys.
"""
from __future__ import annotations

import statistics
from collections import defaultdict
from pathlib import Path

from rcagent.batch import AGENT_METHODS, read_results
from rcagent.errors import BadInput
from rcagent.eval.labels import load_label
from rcagent.validate import safe_name
from rcagent.eval.scoring import RECALL_KS, Inventory, level, score_case

BY_KEYS = ("source", "system", "fault", "level")


def annotated_levels(labels: Path) -> dict[str, set[str]]:
    """source -> the levels its labels use (RCAtlas maps answers up to the levels the dataset annotates)."""
    out: dict[str, set[str]] = defaultdict(set)
    for path in labels.glob("*.yaml"):
        label = load_label(labels, path.stem) or {}
        for rc in label.get("root_causes") or []:
            out[label.get("source", "")].add(rc.get("level") or "service")
    return dict(out)


class Inventories:
    """Each job's inventory, loaded once (the job folder is found from the result line or the jobs folder)."""

    def __init__(self, jobs_dir: Path | None):
        self.jobs_dir, self.cache = jobs_dir, {}

    def get(self, row: dict) -> Inventory:
        from rcagent.job import Job

        job = row["job"]
        if job not in self.cache:
            # the jobs folder first: a job id is a name inside it (never a path out of it)
            candidates = ([self.jobs_dir / safe_name(job, "job id")] if self.jobs_dir else []) + \
                         ([Path(row["job_path"])] if row.get("job_path") else [])
            path = next((p for p in candidates if (p / "job.yaml").is_file()), None)
            if path is None:
                raise BadInput(f"job {job}: folder not found ({', '.join(map(str, candidates)) or 'no path'}); "
                               "pass --jobs")
            loaded = Job.load(path)
            self.cache[job] = Inventory.from_job(loaded)
            loaded.con.close()
        return self.cache[job]


def method_of(row: dict) -> str:
    """The name results are grouped by: the baseline's name, or the agent's mode and model."""
    method = row.get("method") or row.get("mode") or "?"
    return f"{method} ({row['model']})" if method in AGENT_METHODS and row.get("model") else method


def score_rows(rows: list[dict], labels: Path, jobs_dir: Path | None) -> tuple[list[dict], list[str]]:
    """One scored case per result line that has a label; the job ids without a label are returned apart."""
    levels = annotated_levels(labels)
    inventories = Inventories(jobs_dir)
    cases, unlabelled = [], []
    latest: dict[tuple[str, str], dict] = {}
    for row in rows:                 # a job run twice by one method counts once: the last line wins
        latest[(method_of(row), row["job"])] = row
    for (method, job), row in latest.items():
        label = load_label(labels, job)
        if not label:
            unlabelled.append(job)
            continue
        truth = [rc["entity"] for rc in label["root_causes"]]
        inventory = inventories.get(row)
        lv = levels.get(label.get("source", ""), {rc.get("level") or "service" for rc in label["root_causes"]})
        answers = [rc["entity"] for rc in row.get("root_causes") or []]
        s = score_case(answers, truth, inventory, lv)
        rc_level = label["root_causes"][0].get("level") or level(inventory.kinds.get(truth[0]))
        cases.append({
            "method": method, "job": job, "run_id": row.get("run_id") or "", "source": label.get("source", ""),
            "system": label.get("system", ""),
            "fault": label.get("fault_type", ""), "level": rc_level, "status": row.get("status", "answered"),
            "answer": answers[:5], "truth": truth, "pr1": s.pr1, "rr": s.rr, "mrr": s.mrr,
            **{f"recall@{k}": s.recall[k] for k in RECALL_KS}, "random_pr1": s.random_pr1,
            "wall_s": row.get("wall_s") or 0.0, "llm_calls": row.get("llm_calls") or 0,
            "tokens": (row.get("prompt_tokens") or 0) + (row.get("completion_tokens") or 0),
            "steps": row.get("steps") or 0, "invalid_steps": row.get("invalid_steps") or 0,
            "finalized": bool(row.get("finalized")), "root_cause": row.get("root_cause") or "",
            "solution": row.get("solution") or "", "ref_root_cause": label.get("root_cause") or "",
            "ref_solution": label.get("solution") or "",
        })
    return cases, unlabelled


def _mean(values: list[float]) -> float | None:
    return round(sum(values) / len(values), 4) if values else None


def summarize(cases: list[dict]) -> dict:
    """The figures of one group of cases."""
    n = len(cases)
    random_rate = _mean([c["random_pr1"] for c in cases]) or 0.0
    pr1 = _mean([c["pr1"] for c in cases]) or 0.0
    steps = sum(c["steps"] for c in cases)
    out = {
        "cases": n, "pr1": pr1, "rr": _mean([c["rr"] for c in cases]), "mrr": _mean([c["mrr"] for c in cases]),
        **{f"recall@{k}": _mean([c[f"recall@{k}"] for c in cases]) for k in RECALL_KS},
        "random_pr1": random_rate, "lift": round(pr1 / random_rate, 2) if random_rate else None,
        "answered": _mean([1.0 if c["status"] == "answered" else 0.0 for c in cases]),
        "mean_wall_s": _mean([c["wall_s"] for c in cases]),
        "median_wall_s": round(statistics.median([c["wall_s"] for c in cases]), 3) if cases else None,
        "llm_calls": _mean([c["llm_calls"] for c in cases]), "tokens": _mean([c["tokens"] for c in cases]),
        # stability (RCAgent): runs that end with a valid finalize; invalid steps over all steps
        "pass_rate": _mean([1.0 if c["finalized"] and c["status"] == "answered" else 0.0 for c in cases]),
        "invalid_rate": round(sum(c["invalid_steps"] for c in cases) / steps, 4) if steps else None,
    }
    for key in ("meteor_rc", "meteor_sol", "embed_rc", "embed_sol", "bleurt_rc", "bleurt_sol",
                "judge_correctness", "judge_helpfulness"):
        values = [c[key] for c in cases if c.get(key) is not None]
        if values:
            out[key] = _mean(values)
    return out


def report(cases: list[dict], by: list[str]) -> dict:
    unknown = [k for k in by if k not in BY_KEYS]
    if unknown:
        raise BadInput(f"--by: unknown key(s) {', '.join(unknown)} (choose from {', '.join(BY_KEYS)})")
    methods = list(dict.fromkeys(c["method"] for c in cases))
    out = {"methods": {m: summarize([c for c in cases if c["method"] == m]) for m in methods}, "by": {}}
    for key in by:
        groups: dict[str, dict[str, list[dict]]] = defaultdict(lambda: defaultdict(list))
        for c in cases:
            groups[c[key]][c["method"]].append(c)
        out["by"][key] = {g: {m: summarize(cs) for m, cs in sorted(per.items(), key=lambda kv: methods.index(kv[0]))}
                          for g, per in sorted(groups.items())}
    return out


def common_cases(cases: list[dict]) -> list[dict]:
    """Only the jobs every method answered for (a side-by-side comparison on the same cases)."""
    methods = {c["method"] for c in cases}
    jobs: dict[str, set[str]] = defaultdict(set)
    for c in cases:
        jobs[c["job"]].add(c["method"])
    return [c for c in cases if jobs[c["job"]] == methods]


def load_cases(results: list[Path], labels: Path, jobs_dir: Path | None) -> tuple[list[dict], list[str]]:
    per_file = []
    for path in results:
        if not path.is_file():
            raise BadInput(f"results file not found: {path}")
        found = read_results(path, strict=True)
        if not found:
            raise BadInput(f"{path}: no result lines (JSONL written by `rcagent batch`)")
        per_file.append((path, found))
    # one method in several files (two runs of the agent with one model) stays apart, named by its file
    files_of: dict[str, set[Path]] = defaultdict(set)
    for path, found in per_file:
        for row in found:
            files_of[method_of(row)].add(path)
    rows = []
    for path, found in per_file:
        for row in found:
            name = method_of(row)
            rows.append({**row, "method": f"{name} [{path.stem}]"} if len(files_of[name]) > 1 else row)
    if not labels.is_dir():
        raise BadInput(f"--labels {labels}: not a folder")
    cases, unlabelled = score_rows(rows, labels, jobs_dir)
    if not cases:
        raise BadInput(f"no result line has a label in {labels}")
    return cases, unlabelled
