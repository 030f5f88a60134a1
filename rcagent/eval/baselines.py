"""Non-LLM baselines on the job's metrics table, as RCAEval defines them, and a random ranking.

NSigma scales each metric series (entity, metric) by the mean and standard deviation of the baseline window;
BARO by the median and interquartile range. A series scores its largest scaled value in the flagged window
and an entity its best series, so the ranking is of entities (RCAtlas maps metric columns to the entity
that owns them). A zero spread scales by 1, as scikit-learn's scalers do. The scores keep their sign, so a
metric that drops (a service that stops receiving calls) ranks last; the `-abs` variants score the largest
absolute deviation instead. `overview` is rcagent's own evidence ranking (the overview tool) with no model,
to show what the model adds; `recent-change` blames the entity changed last before the window's end (from the
events table), the floor for change-induced incidents. Each returns a Diagnosis in the same shape as the
agent's.
"""
from __future__ import annotations

import hashlib
import random
import time
from typing import Callable

from rcagent.diagnosis import Diagnosis, RootCause
from rcagent.job import Job
from rcagent.tools.change_signals import latest_changes
from rcagent.tools.overview import ranking

TOP = 10   # ranked entities kept in the diagnosis (the scorer reads at most ten)


def _centre_spread(job: Job, method: str) -> tuple[str, str]:
    base = job.in_baseline("metrics")
    if method == "nsigma":
        return (f"avg(value) FILTER (WHERE {base})", f"stddev_pop(value) FILTER (WHERE {base})")
    return (f"quantile_cont(value, 0.5) FILTER (WHERE {base})",
            f"quantile_cont(value, 0.75) FILTER (WHERE {base}) - quantile_cont(value, 0.25) FILTER (WHERE {base})")


def metric_scores(job: Job, method: str, absolute: bool) -> list[tuple[str, str, float]]:
    """[(entity, metric, score)] for every series with baseline and window values, best first."""
    if not job.rows.get("metrics"):
        return []
    centre, spread = _centre_spread(job, method)
    deviation = "abs(m.value - s.c) / s.d" if absolute else "(m.value - s.c) / s.d"
    rows = job.query(f"""
        WITH s AS (SELECT entity, metric, {centre} AS c,
                          CASE WHEN coalesce({spread}, 0) = 0 THEN 1 ELSE {spread} END AS d
                   FROM metrics GROUP BY entity, metric)
        SELECT m.entity, m.metric, max({deviation}) AS score
        FROM metrics m JOIN s USING (entity, metric)
        WHERE s.c IS NOT NULL AND m.value IS NOT NULL AND {job.in_window('m.timestamp')}
        GROUP BY m.entity, m.metric""")
    return sorted(((e, m, float(s)) for e, m, s in rows if s is not None), key=lambda r: (-r[2], r[0], r[1]))


def statistical(job: Job, method: str, absolute: bool = False) -> Diagnosis:
    name = method + ("-abs" if absolute else "")
    best: dict[str, tuple[float, str]] = {}
    for entity, metric, score in metric_scores(job, method, absolute):
        owner = job.entities.get(entity)
        if owner and entity not in best:
            best[entity] = (score, metric)
    ranked = sorted(best.items(), key=lambda kv: (-kv[1][0], kv[0]))[:TOP]
    causes = [RootCause(e, job.entities[e].kind, round(s, 3)) for e, (s, _) in ranked]
    evidence = [f"{e}: {m} scored {s:.1f} against the baseline" for e, (s, m) in ranked[:5]]
    if causes:
        text = f"{name}: {ranked[0][1][1]} of {ranked[0][0]} deviated most from the baseline ({ranked[0][1][0]:.1f})."
    else:
        text = f"{name}: no metric series has both baseline and window values."
    return Diagnosis(job=job.id, run_id="", root_causes=causes, root_cause=text, evidence=evidence,
                     finalized=bool(causes), backend="none", model=name, mode=name,
                     note="" if causes else "no metrics to rank")


def random_ranking(job: Job, seed: int = 0) -> Diagnosis:
    """The inventory in a random order, seeded by the job and the seed (the same job gives the same order)."""
    digest = hashlib.sha256(f"{job.id}:{seed}".encode()).hexdigest()
    names = sorted(job.entities)
    random.Random(int(digest[:16], 16)).shuffle(names)
    causes = [RootCause(e, job.entities[e].kind, round(1 / (i + 1), 3)) for i, e in enumerate(names[:TOP])]
    return Diagnosis(job=job.id, run_id="", root_causes=causes, root_cause="random ranking of the inventory",
                     finalized=True, backend="none", model="random", mode="random")


def recent_change(job: Job) -> Diagnosis:
    """Blame the most recent change: entities with a change event up to the window's end, the latest change
    first (a pod's change counts for its service). The floor a change-aware diagnosis must beat."""
    latest = {name: change[0] for name, change in latest_changes(job).items()}
    ranked = sorted(latest.items(), key=lambda kv: (kv[1], kv[0]), reverse=True)[:TOP]
    causes = [RootCause(e, job.entities[e].kind, round(1 / (i + 1), 3)) for i, (e, _) in enumerate(ranked)]
    text = (f"recent-change: {ranked[0][0]} changed last, at {ranked[0][1]:%Y-%m-%d %H:%M:%S} UTC."
            if ranked else "recent-change: no change event before the window's end.")
    return Diagnosis(job=job.id, run_id="", root_causes=causes, root_cause=text,
                     evidence=[f"{e}: changed at {at:%H:%M:%S}" for e, at in ranked[:5]], finalized=bool(causes),
                     backend="none", model="recent-change", mode="recent-change",
                     note="" if causes else "no change events")


def evidence_ranking(job: Job) -> Diagnosis:
    """rcagent's overview tool alone: what the agent's evidence ranking gives without any model."""
    ranked = ranking(job)[:TOP]
    causes = [RootCause(e, job.entities[e].kind, s) for e, s, _ in ranked]
    evidence = [f"{e}: {'; '.join(r)}" for e, _, r in ranked[:5]]
    text = f"overview: {ranked[0][0]} moved most from its baseline." if ranked else "overview: nothing moved."
    return Diagnosis(job=job.id, run_id="", root_causes=causes, root_cause=text, evidence=evidence,
                     finalized=bool(causes), backend="none", model="overview", mode="overview")


METHODS: dict[str, Callable[[Job, int], Diagnosis]] = {
    "nsigma": lambda job, seed: statistical(job, "nsigma"),
    "nsigma-abs": lambda job, seed: statistical(job, "nsigma", absolute=True),
    "baro": lambda job, seed: statistical(job, "baro"),
    "baro-abs": lambda job, seed: statistical(job, "baro", absolute=True),
    "random": lambda job, seed: random_ranking(job, seed),
    "overview": lambda job, seed: evidence_ranking(job),
    "recent-change": lambda job, seed: recent_change(job),
}


def run_baseline(job: Job, method: str, seed: int = 0) -> Diagnosis:
    start = time.perf_counter()
    diagnosis = METHODS[method](job, seed)
    diagnosis.wall_s = round(time.perf_counter() - start, 3)
    return diagnosis
