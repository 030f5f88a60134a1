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


from rcagent.eval.rankbench import jobs_from_arguments, pr1_by_variant, variant_table
from rcagent.job import TABLES, Job, Period, cut_around
from rcagent.onset import split_at_onset, undo_split

VARIANTS = ("as imported", "through the window, read as given", "through the window, cut")


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
    _, labels = jobs_from_arguments()
    hits = pr1_by_variant(labels, {VARIANTS[0]: None,
                                   VARIANTS[1]: lambda job: through_window(job, cut=False),
                                   VARIANTS[2]: lambda job: through_window(job, cut=True)})
    print("\nPR@1 with one baseline period through the window: the ranking (NSigma / BARO / random)\n")
    print(variant_table(hits, list(VARIANTS)))

if __name__ == "__main__":
    main()
