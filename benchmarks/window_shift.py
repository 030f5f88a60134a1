"""How much the ranking depends on where the flagged window lies: the same incidents with the window moved.

    python benchmarks/window_shift.py --jobs ~/.cache/rcagent/work [--pattern 'tt-*'] [--fraction 0.25]

An operator's alert window is not a dataset's: an alert fires late or early, a window is drawn by hand, the
analysis runs while the incident is still going on. The rankings were built on each dataset's own windows,
so a sceptic asks whether they only work there. Per system, PR@1 of the default ranking with the window as
imported and moved by a fraction of its own length (no system's minutes are assumed), in memory (the job's
files are not touched):
- starts earlier: the window holds fault-free time before the incident; baseline periods lose whatever the
  wider window now covers;
- starts later: the incident's first part falls between the baseline and the window;
- ends earlier: the incident is analysed before it is over.
Tables that came without a baseline are split at the onset found inside the moved window, as Job.load
splits the imported one. NSigma, BARO and random run on the same moved windows, in the same run.
"""
from __future__ import annotations

import argparse
from dataclasses import replace

from rcagent.eval.rankbench import jobs_from_arguments, pr1_by_variant, variant_table
from rcagent.job import Job, cut_around
from rcagent.onset import split_at_onset, undo_split

VARIANTS = ("as imported", "starts earlier", "starts later", "ends earlier")


def move_window(job: Job, variant: str, fraction: float) -> None:
    """The job with its window moved as `variant` says (see the module's docstring)."""
    undo_split(job)
    start, end = job.window.start, job.window.end
    shift = (end - start) * fraction
    if variant == "starts earlier":
        start -= shift
    elif variant == "starts later":
        start += shift
    elif variant == "ends earlier":
        end -= shift
    job.window = replace(job.window, start=start, end=end)
    job.baseline = [part for p in job.baseline for part in cut_around(p, start, end)]
    job.cache.clear()
    split_at_onset(job)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--fraction", type=float, default=0.25, help="how far to move, as a share of the window")
    args, labels = jobs_from_arguments(ap)

    def report(job_id: str, row: dict) -> None:
        changed = [v for v in VARIANTS[1:] if row[v]["ranking"] != row[VARIANTS[0]]["ranking"]]
        if changed:
            print(f"{job_id}: " + ", ".join(f"{v} {'found' if row[v]['ranking'] else 'lost'}" for v in changed),
                  flush=True)

    hits = pr1_by_variant(labels, {v: None if v == VARIANTS[0] else
                                   lambda job, v=v: move_window(job, v, args.fraction) for v in VARIANTS}, report)
    print(f"\nPR@1 with the window moved by {args.fraction:.0%} of its length: the ranking "
          f"(NSigma / BARO / random)\n")
    print(variant_table(hits, list(VARIANTS)))

if __name__ == "__main__":
    main()
