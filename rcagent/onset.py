"""The onset of an incident inside its window, for jobs (or tables of a job) that come without a fault-free
baseline.

Every series the job has inside the window (each metric of each entity; each service's span count, mean
duration and error count; each entity's warning/error log count) is cut into BUCKETS equal time buckets.
For every candidate split the share of a series' variance that a step at that split explains (between-
segment sum of squares over total) is summed over all series: the onset is the split that the most series
agree on. It is an onset only if the series agree on it more than they agree on any split of the same
series with their buckets shuffled (SHUFFLES seeded permutations: a permutation test at about 5%): otherwise
the window is one regime (the fault began before it, or nothing shifted) and there is no onset. The onset
then moves back to the start of a metric sample that spans it (a 5-minute sample stamped 04:47 holds the
minutes after an onset at 04:47:50), but not to where a table it splits has (almost) no rows before it
(trace files may begin later in the window than the metrics). Before the onset then serves as the baseline
and the rest as the window, so every tool compares like with like. A single mean-shift split by cumulative
sums is all this needs: one vectorised pass over all series (a change-point library would loop over tens of
thousands of series one by one).
"""
from __future__ import annotations

import datetime as dt
from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np

from rcagent.errorlike import ERR, ERROR_LIKE, ERROR_PARAMS

if TYPE_CHECKING:
    from rcagent.job import Job

BUCKETS = 30      # time buckets the window is cut into
MIN_POINTS = 2    # buckets with data a series needs on each side of a split
MIN_SHARE = 0.15  # the onset leaves at least this share of the window on each side
SHUFFLES = 19     # the onset must beat the best split of each of this many shuffles of the buckets


def _series(job: Job, width: float) -> list[tuple]:
    """(series key, bucket index, value) of every series inside the window."""
    start = job.window.start
    bucket = f"floor(epoch(CAST({{col}} AS TIMESTAMP) - TIMESTAMP '{start}') / {width})"
    out: list[tuple] = []
    if job.rows.get("metrics"):
        out += job.query(f"""SELECT 'm' || entity || chr(0) || metric, {bucket.format(col='timestamp')}, avg(value)
                             FROM metrics WHERE {job.in_window()} AND value IS NOT NULL GROUP BY 1, 2""")
    if job.rows.get("traces"):
        b = bucket.format(col="start")
        for name, agg in (("calls", "count(*)"), ("duration", "avg(duration_ms)"),
                          ("errors", f"count(*) FILTER (WHERE {ERR})")):
            out += job.query(f"""SELECT 't{name}' || chr(0) || coalesce(service, entity), {b}, {agg}
                                 FROM traces WHERE {job.in_window('start')} GROUP BY 1, 2""")
    if job.rows.get("logs"):
        out += job.query(f"""SELECT 'l' || entity, {bucket.format(col='timestamp')}, count(*) FROM logs
                             WHERE {job.in_window()} AND {ERROR_LIKE} GROUP BY 1, 2""", ERROR_PARAMS)
    return out


def step_scores(matrix: np.ndarray) -> np.ndarray:
    """For a (series x buckets) matrix with NaN where a series has no value: per split k (between bucket
    k-1 and k), the summed share of each series' variance explained by a step at k."""
    have = ~np.isnan(matrix)
    x = np.where(have, matrix, 0.0)
    n = have.sum(axis=1, keepdims=True).astype(float)
    # a series of values near the float range (1e308: hostile or broken data) overflows: it counts nothing
    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
        total = x.sum(axis=1, keepdims=True)
        sse = (np.where(have, (matrix - total / np.maximum(n, 1)) ** 2, 0.0)).sum(axis=1)
        n1 = np.cumsum(have, axis=1)[:, :-1].astype(float)      # points left of split k = 1..B-1
        s1 = np.cumsum(x, axis=1)[:, :-1]
        n2, s2 = n - n1, total - s1
        between = n1 * n2 / n * (s1 / n1 - s2 / n2) ** 2
        share = between / sse[:, None]
    ok = (n1 >= MIN_POINTS) & (n2 >= MIN_POINTS) & (sse[:, None] > 0) & np.isfinite(share)
    return np.where(ok, share, 0.0).sum(axis=0)


def _best_split(matrix: np.ndarray, edge: int) -> np.ndarray:
    """step_scores with the splits that leave less than `edge` buckets on a side zeroed."""
    scores = step_scores(matrix)
    scores[: edge - 1] = 0.0
    scores[BUCKETS - edge:] = 0.0
    return scores


def beyond_chance(matrix: np.ndarray, best: float, edge: int) -> bool:
    """The series agree on their best split more than on the best split of any of SHUFFLES copies with
    each series' buckets shuffled (seeded: the same job gives the same onset)."""
    rng = np.random.default_rng(0)
    for _ in range(SHUFFLES):
        shuffled = rng.permuted(matrix, axis=1)
        if _best_split(shuffled, edge).max() >= best:
            return False
    return True


def find_onset(job: Job, tables: tuple[str, ...] = ()) -> dt.datetime | None:
    """The time inside the window where the most series shift beyond chance, or None (no series, no
    split leaves MIN_SHARE of the window on each side, or no split beats the shuffled series). `tables`:
    those the onset will split (see _back_to_sample_start)."""
    width = job.window.seconds / BUCKETS
    if width <= 0:
        return None
    rows = _series(job, width)
    keys = {k: i for i, k in enumerate(sorted({r[0] for r in rows}))}
    if not keys:
        return None
    matrix = np.full((len(keys), BUCKETS), np.nan)
    for key, k, value in rows:
        if value is not None and 0 <= k < BUCKETS:
            matrix[keys[key], int(k)] = float(value)
    edge = max(1, int(BUCKETS * MIN_SHARE))
    scores = _best_split(matrix, edge)
    if not scores.any() or not beyond_chance(matrix, scores.max(), edge):
        return None
    split = int(np.argmax(scores)) + 1  # buckets before the split form the baseline
    onset = job.window.start + dt.timedelta(seconds=split * width)
    earliest = None
    if tables:
        earliest = min(onset, _first_rows(job, tables) + dt.timedelta(seconds=MIN_POINTS * width))
    return _back_to_sample_start(job, onset, earliest)


def _first_rows(job: Job, tables: tuple[str, ...]) -> dt.datetime:
    """The latest of the tables' first rows inside the window (the window's start if none has rows)."""
    firsts = [job.window.start]
    for table in (t for t in tables if job.rows.get(t)):   # table: a name from job.without_history()
        col = job.time_column(table)
        firsts.append(job.query(f"SELECT min({col}) FROM {table} WHERE {job.in_window(col)}")[0][0])
    return max(f for f in firsts if f is not None)


def _back_to_sample_start(job: Job, onset: dt.datetime, earliest: dt.datetime | None = None) -> dt.datetime:
    """The onset moved back to the start of the metric sample that spans it, so that no sample of the part
    before the onset holds a post-onset aggregate. A sample stamped t covers [t, t + step) (step: the usual
    gap of the table's series in the window; a sparse series does not set it), as a 5-minute
    cloud-monitoring sample does; a series stamped at the end of its interval loses nothing by this (its
    sample at or before the onset lies wholly before it, and merely joins the part after). Not moved when
    that would leave the typical series fewer than MIN_POINTS samples before it (no spread to judge the
    rest by), or put it before `earliest` (find_onset: MIN_POINTS buckets after the first row of a table the
    onset splits, where that comes after the window's start; a trace file that begins at the second a metric
    sample is stamped would be left nothing before the onset, and the onset would depend on how early the
    window starts)."""
    step = usual_step(job)
    if step is None:
        return onset
    since, before = job.query(f"""
            WITH gaps AS (SELECT entity, metric, timestamp, epoch(timestamp) - epoch(lag(timestamp)
                                 OVER (PARTITION BY entity, metric ORDER BY timestamp)) AS gap
                          FROM metrics WHERE {job.in_window()} AND value IS NOT NULL),
                 series AS (SELECT entity, metric, median(gap) AS step,
                                   max(timestamp) FILTER (WHERE timestamp <= $onset) AS last
                            FROM gaps GROUP BY entity, metric),
                 moved AS (SELECT min(last) AS since FROM series
                           WHERE series.step = $step AND epoch($onset) - epoch(last) < $step)
            SELECT (SELECT since FROM moved),
                   (SELECT median(n) FROM (SELECT count(*) FILTER (WHERE g.timestamp < m.since) AS n
                                           FROM gaps g, moved m GROUP BY g.entity, g.metric))""",
                              {"onset": onset, "step": step})[0]
    # samples before `since` imply it lies after the window's start
    if since is None or (before or 0) < MIN_POINTS or (earliest is not None and since < earliest):
        return onset
    return since


def usual_step(job: Job) -> float | None:
    """The metrics table's usual sampling step in the window, in seconds: the most common of its series'
    median gaps (a sparse series, few requests, does not set it); None without metrics or repeated samples.
    Cached: the signals of every ranking setting ask for it."""
    if not job.rows.get("metrics"):
        return None
    if "usual_step" not in job.cache:
        job.cache["usual_step"] = job.query(f"""
            SELECT mode(step) FROM (SELECT median(gap) AS step FROM (
                SELECT entity, metric, epoch(timestamp) - epoch(lag(timestamp) OVER (
                           PARTITION BY entity, metric ORDER BY timestamp)) AS gap
                FROM metrics WHERE {job.in_window()} AND value IS NOT NULL) GROUP BY entity, metric)""")[0][0]
    return job.cache["usual_step"]


def split_at_onset(job: Job, at: dt.datetime | None = None) -> dt.datetime | None:
    """For a job with a table of series (metrics, traces, logs) that no baseline period covers: the window
    before the onset becomes the baseline of those tables, and the window starts at the onset. The onset is
    `at` if given (a known start of the fault, inside the window: for benchmarks), else find_onset's.
    Returns the onset, or None (the job is left as it was)."""
    bare = tuple(job.without_history())
    if not bare:
        return None
    if at is None:
        onset = find_onset(job, tuple(bare))
    elif job.window.start < at < job.window.end:
        onset = _back_to_sample_start(job, at)
    else:
        onset = None
    if onset is None:
        return None
    job.onset = replace(job.window, end=onset, tables=bare)
    job.baseline = job.baseline + [job.onset]
    job.window = replace(job.window, start=onset)
    job.cache.clear()
    return onset


def undo_split(job: Job) -> None:
    """The job as given, before the split Job.load made for tables that had no baseline (if it made one)."""
    if job.onset is not None:
        job.baseline = [p for p in job.baseline if p is not job.onset]
        job.window = replace(job.window, start=job.onset.start)
        job.onset = None
        job.cache.clear()


def without_baseline(job: Job, at: dt.datetime | None = None) -> dt.datetime | None:
    """The job as if it had come with no baseline at all: its window as given, split at its own onset (the
    "no baseline" variant of `rcagent bench ranking`), or at `at` (see split_at_onset)."""
    undo_split(job)
    job.baseline = []
    job.cache.clear()
    return split_at_onset(job, at)

