"""A baseline that runs through the window: what the ranking finds when it is read as given and when cut.

    python benchmarks/baseline_overlap.py --jobs ~/.cache/rcagent/work [--pattern 'tt-*']

An operator asked for a baseline often gives "the last hour", the incident included. Each job that has a
baseline gets one in its place that runs from the first baseline start to the last baseline end (or the
window's, whichever is further), for every table, and is ranked three ways, in memory (the job's files are
not touched): with the baselines as imported; with the one period read as given (the incident's own samples
in the baseline); with that period cut around the window as Job.load now cuts it (rcagent.job.cut_around).
PR@1 per system, NSigma / BARO / random on the same baselines, in the same run.
"""
from __future__ import annotations

import argparse
from collections import defaultdict
from pathlib import Path

from rcagent.eval.rankbench import BASELINES, _groups, labelled_jobs, pr1_by_method
from rcagent.job import TABLES, Job, Period, cut_around
from rcagent.onset import split_at_onset, undo_split

VARIANTS = ("as imported", "through the window, read as given", "through the window, cut")
METHODS = ("ranking", *BASELINES)


def through_window(job: Job, cut: bool) -> bool:
    """The job with one baseline period that spans its baselines and its window; False without a baseline."""
    undo_split(job)
    if not job.baseline:
        return False
    w = job.window
    span = Period(min(p.start for p in [*job.baseline, w]), max(p.end for p in [*job.baseline, w]), TABLES)
    job.baseline = cut_around(span, w.start, w.end) if cut else [span]
    job.cache.clear()
    split_at_onset(job)
    return True


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", required=True, help="an import DEST (holding jobs/ and labels/)")
    ap.add_argument("--pattern", default="*")
    args = ap.parse_args()
    labels = labelled_jobs(Path(args.jobs).expanduser(), args.pattern)
    groups = _groups({j: lab for j, (_, lab) in labels.items()})
    hits: dict[str, dict[tuple[str, str], list[float]]] = defaultdict(lambda: defaultdict(list))
    for job_id, (folder, label) in labels.items():
        row = {VARIANTS[0]: pr1_by_method(folder, label),
               VARIANTS[1]: pr1_by_method(folder, label, lambda job: through_window(job, cut=False)),
               VARIANTS[2]: pr1_by_method(folder, label, lambda job: through_window(job, cut=True))}
        if row[VARIANTS[1]] is None:   # no baseline to rewrite
            continue
        for v, pr1 in row.items():
            for m in METHODS:
                hits[groups[job_id]][v, m].append(pr1[m])
                hits["all"][v, m].append(pr1[m])
    print("\nPR@1 with one baseline period through the window: the ranking (NSigma / BARO / random)\n")
    print("| system | jobs | " + " | ".join(VARIANTS) + " |")
    print("|---|---|" + "---|" * len(VARIANTS))
    for g in sorted(hits, key=lambda g: (g == "all", g)):
        def pct(v: str, m: str) -> str:
            return f"{100 * sum(hits[g][v, m]) / len(hits[g][v, m]):.1f}"
        print(f"| {g} | {len(hits[g][VARIANTS[0], 'ranking'])} | " + " | ".join(
            f"{pct(v, 'ranking')} ({' / '.join(pct(v, m) for m in METHODS[1:])})" for v in VARIANTS) + " |")


if __name__ == "__main__":
    main()
