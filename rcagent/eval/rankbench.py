"""`rcagent bench ranking`: the evidence ranking (the overview) scored leave-one-system-out, beside NSigma,
BARO and random on the same cases, in one run.

Jobs are grouped by system (and by source where one system comes from two sources, e.g. fault injection
and defective rollouts). For each held-out group, the ranking's parameters (tools.overview.RankingParams)
are chosen from a small grid on the other groups and the held-out group is scored with them: the group
never sees parameters chosen on itself. The choice is the best PR@1 averaged over the other groups, each
group one vote whatever its number of jobs (the aim is a setting that works on a system not yet seen, so a
system with many jobs must not outvote the rest); ties go to the best RR averaged the same way, then to the
setting nearest the hand-fixed defaults (the fewest parameters changed: a parameter the other systems cannot
tell apart stays at its default rather than at the grid's first value), then grid order.
Beside it: the defaults as they are, NSigma, BARO and the seeded random ranking, and a "no baseline" variant
of every job (its baseline periods removed, the window as given, split at the onset found inside it as
Job.load splits a job that comes without a baseline), scored with parameters chosen the same way on the
other groups' no-baseline variants (and, for comparison, with the full jobs' choice).
Each held-out PR@1 comes with its 95% Wilson score interval: a group holds a few dozen cases, and a reader
should see how far a figure could move by chance before comparing it with a floor or with another row. The
full jobs and their no-baseline variants are the same cases, so they are also compared pair by pair: the
cases found only with the baseline, only without it, and the exact sign test's two-sided p of that split.
"""
from __future__ import annotations

import argparse
import itertools
import math
import statistics
from collections import defaultdict
from dataclasses import asdict, fields
from pathlib import Path
from typing import Callable

from rcagent.eval.baselines import run_baseline
from rcagent.errors import BadInput
from rcagent.eval.labels import labels_dir, load_label
from rcagent.onset import without_baseline
from rcagent.tables import pct, render_table
from rcagent.eval.scoring import Inventory, level, score_case
from rcagent.tools.overview import DEFAULT, RankingParams, ranking

GRID = [RankingParams(*values) for values in
        itertools.product((2.0, 3.0, 4.0), (3.0, 5.0, 8.0), (0.5, 1.0), (0.0, 0.25, 0.5), (0.5, 1.0), (0.5, 1.0),
                           (0.5, 1.0), (0.5, 1.0), (0.0, 0.5))]
BASELINES = ("nsigma", "baro", "random")


def _groups(labels: dict[str, dict]) -> dict[str, str]:
    """job id -> its group: the system, plus the source where a system has jobs from several sources."""
    sources: dict[str, set[str]] = defaultdict(set)
    for lab in labels.values():
        sources[lab.get("system", "?")].add(lab.get("source", "?"))
    return {job: lab.get("system", "?") + (f" ({lab.get('source', '?')})" if len(sources[lab.get("system", "?")]) > 1
                                           else "") for job, lab in labels.items()}


def _score(answers: list[str], label: dict, inventory: Inventory, levels: set[str]) -> tuple[float, float]:
    s = score_case(answers, [rc["entity"] for rc in label["root_causes"]], inventory, levels)
    return s.pr1, s.rr


def labelled_jobs(root: Path, pattern: str = "*") -> dict[str, tuple[Path, dict]]:
    """job id -> (job folder, label) for the jobs of an import DEST (jobs/ and labels/) matching `pattern`
    that have a label (for the benchmark scripts)."""
    found = {p.name: (p, load_label(root / "labels", p.name)) for p in sorted((root / "jobs").glob(pattern))
             if p.is_dir()}
    return {j: v for j, v in found.items() if v[1]}


def jobs_from_arguments(ap: argparse.ArgumentParser | None = None) -> tuple[argparse.Namespace, dict]:
    """The benchmark scripts' command line: `--jobs DEST` (an import DEST) and `--pattern GLOB`, plus what
    `ap` adds; (the parsed arguments, labelled_jobs of DEST matching GLOB)."""
    ap = ap or argparse.ArgumentParser()
    ap.add_argument("--jobs", required=True, help="an import DEST (holding jobs/ and labels/)")
    ap.add_argument("--pattern", default="*", help="only the jobs whose folder name matches this glob")
    args = ap.parse_args()
    return args, labelled_jobs(Path(args.jobs).expanduser(), args.pattern)


def pr1_by_method(folder: Path, label: dict, change: Callable | None = None) -> dict[str, float] | None:
    """PR@1 of the ranking (defaults) and of each baseline on the job in `folder`, after `change(job)` (in
    memory: the benchmark scripts that move a window or thin a table); None when the change returns False
    (it does not apply to the job)."""
    from rcagent.job import Job

    job = Job.load(folder)
    try:
        if change is not None and change(job) is False:
            return None
        inventory = Inventory.from_job(job)
        levels = {rc.get("level") or level(inventory.kinds.get(rc["entity"])) for rc in label["root_causes"]}
        answers = {"ranking": [e for e, _, _ in ranking(job)]}
        answers |= {m: [rc.entity for rc in run_baseline(job, m).root_causes] for m in BASELINES}
        return {m: _score(a, label, inventory, levels)[0] for m, a in answers.items()}
    finally:
        job.con.close()


def pr1_by_variant(labels: dict[str, tuple[Path, dict]], variants: dict[str, Callable | None],
                   on_job: Callable[[str, dict], None] | None = None) -> dict[str, dict[tuple[str, str], list]]:
    """Per system group and "all": (variant, method) -> each job's PR@1, every variant being pr1_by_method's
    `change` (None: the job as it is). A job that a variant does not apply to is left out of all of them;
    `on_job(job_id, row)` sees each job's row of results."""
    groups = _groups({j: lab for j, (_, lab) in labels.items()})
    hits: dict[str, dict[tuple[str, str], list[float]]] = defaultdict(lambda: defaultdict(list))
    for job_id, (folder, label) in labels.items():
        row = {v: pr1_by_method(folder, label, change) for v, change in variants.items()}
        if any(pr1 is None for pr1 in row.values()):
            continue
        if on_job is not None:
            on_job(job_id, row)
        tally(hits, groups[job_id], row)
    return hits


def tally(hits: dict[str, dict[tuple[str, str], list]], group: str, row: dict[str, dict[str, float]]) -> None:
    """Add one job's PR@1 per variant and method (`row`) to its group's and to "all"."""
    for v, pr1 in row.items():
        for m in ("ranking", *BASELINES):
            for g in (group, "all"):
                hits[g][v, m].append(pr1[m])


def variant_table(hits: dict[str, dict[tuple[str, str], list]], variants: list[str]) -> str:
    """pr1_by_variant's result as a Markdown table: the ranking's PR@1 (NSigma / BARO / random) per variant."""
    lines = ["| system | jobs | " + " | ".join(variants) + " |", "|---|---|" + "---|" * len(variants)]
    for g in sorted(hits, key=lambda g: (g == "all", g)):
        def cell(v: str, m: str) -> str:
            return f"{100 * sum(hits[g][v, m]) / len(hits[g][v, m]):.1f}"
        lines.append(f"| {g} | {len(hits[g][variants[0], 'ranking'])} | " + " | ".join(
            f"{cell(v, 'ranking')} ({' / '.join(cell(v, m) for m in BASELINES)})" for v in variants) + " |")
    return "\n".join(lines)


def measure(jobs: list[Path], labels_root: Path, progress: Callable[[str], None] | None = None) -> list[dict]:
    """Per job: its group, and PR@1/RR of every grid setting (full and no-baseline) and of each baseline."""
    from rcagent.job import Job

    labels = {}
    for path in jobs:
        lab = load_label(labels_root, path.name)
        if lab:
            labels[path.name] = (path, lab)
    if not labels:
        raise BadInput(f"no job of {jobs[0].parent if jobs else '?'} has a label in {labels_root}")
    groups = _groups({j: lab for j, (_, lab) in labels.items()})
    out = []
    for n, (job_id, (path, lab)) in enumerate(sorted(labels.items()), 1):
        job = Job.load(path)
        inventory = Inventory.from_job(job)
        levels = {rc.get("level") or level(inventory.kinds.get(rc["entity"])) for rc in lab["root_causes"]}
        row = {"job": job_id, "group": groups[job_id], "full": {}, "no_baseline": {}}
        for params in GRID:
            row["full"][params] = _score([e for e, _, _ in ranking(job, params=params)], lab, inventory, levels)
        for method in BASELINES:
            row[method] = _score([rc.entity for rc in run_baseline(job, method).root_causes], lab, inventory, levels)
        without_baseline(job)      # the same job with no fault-free period: its window split at its onset
        for params in GRID:
            row["no_baseline"][params] = _score([e for e, _, _ in ranking(job, params=params)], lab, inventory,
                                                levels)
        job.con.close()
        out.append(row)
        if progress:
            progress(f"[{n}/{len(labels)}] {job_id} {groups[job_id]}")
    return out


def _mean(values) -> float:
    values = list(values)
    return round(statistics.fmean(values), 4) if values else 0.0


def leave_one_out(rows: list[dict]) -> list[dict]:
    """One result per held-out group (and 'all', the cases of every group, each scored held out)."""
    groups = sorted({r["group"] for r in rows})
    results, held_all = [], []
    for group in groups:
        train = [r for r in rows if r["group"] != group]
        test = [r for r in rows if r["group"] == group]

        best = _choose(train, "full")
        best_nb = _choose(train, "no_baseline")   # jobs without a baseline: chosen on such jobs of the others
        held_all += [(r, best, best_nb) for r in test]
        results.append(_result(group, test, best, best_nb))
    results.append(_result("all", [r for r, _, _ in held_all], None, None,
                           chosen=[b for _, b, _ in held_all], chosen_nb=[b for _, _, b in held_all]))
    return results


def _choose(train: list[dict], variant: str) -> RankingParams:
    """The grid setting with the best PR@1 averaged over the training groups, each group's mean one vote
    (ties: the best RR averaged the same way, which also rewards a root cause ranked second rather than
    tenth; then the fewest parameters changed from the defaults, then grid order)."""
    by_group: dict[str, list[dict]] = defaultdict(list)
    for r in train:
        by_group[r["group"]].append(r)

    def mean(p, i):
        return round(statistics.fmean(statistics.fmean(r[variant][p][i] for r in rows)
                                      for rows in by_group.values()), 9) if train else 0.0
    return max(GRID, key=lambda p: (mean(p, 0), mean(p, 1), -changed(p), -GRID.index(p)))


def wilson(successes: float, n: int, z: float = 1.96) -> tuple[float, float] | None:
    """The Wilson score interval of a proportion (95% for z = 1.96): unlike the normal approximation it
    stays within 0..1 and is not empty at 0 or n successes. None for no cases."""
    if n <= 0:
        return None
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return round(max(0.0, centre - half), 4), round(min(1.0, centre + half), 4)


def sign_test(a: int, b: int) -> float:
    """Two-sided exact sign test of a split of discordant pairs (a found only one way, b only the other):
    the chance of a split at least this uneven if either way were as likely."""
    n, k = a + b, min(a, b)
    return min(1.0, 2 * sum(math.comb(n, i) for i in range(k + 1)) / 2 ** n) if n else 1.0


def changed(p: RankingParams) -> int:
    """How many of the setting's parameters differ from the hand-fixed defaults."""
    return sum(getattr(p, f.name) != getattr(DEFAULT, f.name) for f in fields(RankingParams))


def _params(p: RankingParams | None) -> dict | None:
    return None if p is None else asdict(p)


def _result(group: str, test: list[dict], best: RankingParams | None, best_nb: RankingParams | None,
            chosen: list | None = None, chosen_nb: list | None = None) -> dict:
    chosen = chosen or [best] * len(test)
    chosen_nb = chosen_nb or [best_nb] * len(test)
    full = [r["full"][p][0] for r, p in zip(test, chosen)]              # each case's PR@1, held out
    bare = [r["no_baseline"][p][0] for r, p in zip(test, chosen_nb)]    # ... of its no-baseline variant
    only_full = sum(f >= 1 > b for f, b in zip(full, bare))
    only_nb = sum(b >= 1 > f for f, b in zip(full, bare))
    return {
        "group": group, "cases": len(test),
        "params": _params(best), "params_no_baseline": _params(best_nb),
        "overview_pr1": _mean(full),
        "overview_pr1_95": wilson(sum(full), len(test)),
        "overview_rr": _mean(r["full"][p][1] for r, p in zip(test, chosen)),
        "defaults_pr1": _mean(r["full"][DEFAULT][0] for r in test),
        "no_baseline_pr1": _mean(bare),
        "no_baseline_pr1_95": wilson(sum(bare), len(test)),
        "only_full": only_full, "only_no_baseline": only_nb, "paired_p": round(sign_test(only_full, only_nb), 4),
        "no_baseline_same_pr1": _mean(r["no_baseline"][p][0] for r, p in zip(test, chosen)),
        **{f"{m}_pr1": _mean(r[m][0] for r in test) for m in BASELINES},
        **{f"{m}_rr": _mean(r[m][1] for r in test) for m in BASELINES},
    }


def table(results: list[dict]) -> str:
    head = ["held out", "cases", "overview PR@1", "95% interval", "overview RR", "defaults PR@1",
            "no baseline PR@1", "95% interval", "found only with / only without baseline (sign test p)",
            "no baseline, full jobs' choice", "NSigma PR@1", "BARO PR@1", "random PR@1",
            f"chosen on the others ({', '.join(f.name for f in fields(RankingParams))})",
            "chosen for no baseline"]
    rows = [[r["group"], r["cases"], pct(r["overview_pr1"]), _interval(r["overview_pr1_95"]),
             *(pct(r[k]) for k in ("overview_rr", "defaults_pr1", "no_baseline_pr1")),
             _interval(r["no_baseline_pr1_95"]),
             f"{r['only_full']} / {r['only_no_baseline']} (p {r['paired_p']:.2g})",
             *(pct(r[k]) for k in ("no_baseline_same_pr1", "nsigma_pr1", "baro_pr1", "random_pr1")),
             *(", ".join(f"{v:g}" for v in r[k].values()) if r[k] else "per group"
               for k in ("params", "params_no_baseline"))] for r in results]
    return render_table(head, rows, "md")


def _interval(bounds: tuple[float, float] | None) -> str:
    return "-" if bounds is None else f"{pct(bounds[0])}–{pct(bounds[1])}"


def run(jobs_dir: Path, labels: Path | None = None, progress=None) -> list[dict]:
    from rcagent.discovery import find_jobs

    jobs = find_jobs(jobs_dir)
    if labels is None and not labels_dir(jobs[0].parent).is_dir():
        raise BadInput(f"{jobs[0].parent}: no labels beside these jobs (looked for {labels_dir(jobs[0].parent)}): "
                       "give the import folder (holding jobs/ and labels/) or --labels")
    labels = labels or labels_dir(jobs[0].parent)
    if not labels.is_dir():
        raise BadInput(f"--labels {labels}: not a folder")
    return leave_one_out(measure(jobs, labels, progress))
