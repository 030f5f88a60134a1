"""A baseline given the wrong date: what the ranking finds when its periods hold none of the job's rows.

    python benchmarks/baseline_misdated.py --jobs ~/.cache/rcagent/work [--pattern 'ss-*']

An operator writing a job by hand may give the baseline yesterday's date. Each job that has a baseline has
its periods moved DAYS days earlier, in memory (the job's files are not touched), and is ranked as Job.load
reads it: a table whose given periods hold none of its rows is read as one given no baseline (split at the
onset found in its window, entities also compared with their peers). Beside it, the job as imported and the
job with its baseline removed (rcagent.onset.without_baseline). A job whose moved periods still hold rows of
every table (PetSite's baselines span days) is scored as it comes. PR@1 per system, NSigma / BARO / random
on the same jobs, in the same run; and how many jobs the ranking answers with nothing at all.
"""
from __future__ import annotations

import datetime as dt
from dataclasses import replace

from rcagent.eval.rankbench import jobs_from_arguments, pr1_by_variant, variant_table
from rcagent.job import Job
from rcagent.onset import split_at_onset, undo_split, without_baseline
from rcagent.tools.overview import ranking

DAYS = 1
VARIANTS = ("as imported", f"baseline {DAYS} day(s) early", "no baseline")
silent: list[bool] = []   # per job with a moved baseline: whether the ranking answered with nothing


def misdated(job: Job) -> bool:
    """The job with its baseline periods DAYS days earlier, loaded as Job.load would; False without one."""
    undo_split(job)
    if not job.baseline:
        return False
    shift = dt.timedelta(days=DAYS)
    job.baseline = [replace(p, start=p.start - shift, end=p.end - shift) for p in job.baseline]
    job.cache.clear()
    split_at_onset(job)
    silent.append(not any(score > 0 for _, score, _ in ranking(job)))
    return True


def bare(job: Job) -> bool:
    """The job with no baseline; False for one that came without (the same jobs as `misdated`)."""
    if not [p for p in job.baseline if p is not job.onset]:
        return False
    without_baseline(job)
    return True


def main() -> None:
    _, labels = jobs_from_arguments()
    hits = pr1_by_variant(labels, {VARIANTS[0]: None, VARIANTS[1]: misdated, VARIANTS[2]: bare})
    print(f"\nPR@1 with the baseline given {DAYS} day(s) early: the ranking (NSigma / BARO / random)\n")
    print(variant_table(hits, list(VARIANTS)))
    print(f"\njobs with the moved baseline that the ranking answered with nothing: {sum(silent)} of {len(silent)}")


if __name__ == "__main__":
    main()
