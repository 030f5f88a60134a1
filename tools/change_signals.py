"""Changes (deployments, config pushes, scaling) as evidence. A change followed by a degradation of the changed
entity on its own account (not one its callees, an earlier period or a shared fall of load explain; less
when a changed callee degraded too) makes it the prime suspect: most production incidents follow a change.
A changed service whose own telemetry did not move is named through a caller's failure that began within
two samples of its change (samples no longer than the table's usual step), after no nearer change of the
caller or its other callees, and that no unchanged callee's own degradation (in the window or already
before its onset) explains; a caller's latency only when the changed callee's own latency went unmeasured
after its change (one measured, and not risen, did not slow it). Harmless rollouts are the rule: one shortly before an unrelated fault must not
take its place (benchmarks/harmless_change.py measures it). No system, dataset or service is named here.
"""
from __future__ import annotations

import datetime as dt
import math
from collections import defaultdict
from typing import TYPE_CHECKING

from rcagent.job import Job
from rcagent.onset import usual_step
from rcagent.tools.common import floor
from rcagent.tools.metric_signals import LATENCY, QUALITY, WAITING, callees, higher_is_better, metric_series
from rcagent.tools.reasons import EXPLAINED_BY_OTHERS, own_worse

if TYPE_CHECKING:
    from rcagent.tools.overview import RankingParams

CHANGE = r"(?i)(deploy|rollout|roll-out|release|config|scal|upgrade|rollback)"   # what a change log calls a change
CHANGE_HORIZON_S = 600   # a change counts up to this long before the window (or the window's length, if longer)
CHANGE_SCORE = 60.0      # a changed entity that degraded after its change outranks symptoms (as an outage does)


def latest_changes(job: Job, since: dt.datetime | None = None) -> dict[str, tuple]:
    """entity -> (time, reason) of its latest change event from `since` (default: any time) to the window's
    end, then (time, reason) of its first in that span (a rollout starts, then replaces pods); a pod's
    change counts for its service."""
    if not job.rows.get("events"):
        return {}
    changes = job.query("""
            SELECT entity, timestamp, coalesce(reason, '') FROM events
            WHERE regexp_matches(coalesce(reason, '') || ' ' || coalesce(message, ''), $change)
              AND timestamp >= $since AND timestamp < $end ORDER BY timestamp, entity""",
                        {"change": CHANGE, "since": since or dt.datetime.min, "end": job.window.end})
    found: dict[str, tuple] = {}
    for entity, at, reason in changes:   # oldest first
        ent = job.entities.get(entity)
        name = ent.service if ent and ent.kind == "pod" and ent.service in job.entities else entity
        if name in job.entities:
            first = found[name][2:] if name in found else (at, reason)
            found[name] = (at, reason, *first)
    return found


def change_signals(job: Job, rows: dict, params: RankingParams,
                   found: dict[str, list[tuple[float, str, str]]]) -> list[tuple[str, tuple[float, str, str]]]:
    """(entity, (score, reason, "changes")) of the changed entities that degraded after their change, and of
    the changed services whose callers failed right after it; `found` holds every other signal, by entity
    (a service's including its pods')."""
    out: list[tuple[str, tuple[float, str, str]]] = []
    degraded = {name: max((s for s, why, src in found.get(name, []) if own_worse(why, src)), default=0.0)
                for name in rows["changes"]}
    for name, (at, reason, first_at, first_reason) in rows["changes"].items():
        # A change followed by a worse service from the changed entity (its own or its pods' errors,
        # latency, success rate; not resource use, which any rollout moves) makes it the prime suspect:
        # most production incidents follow a change. A change with no degradation after it adds nothing
        # (harmless changes are the rule). Of two changed entities on one call path that both degraded,
        # the callee's change explains the caller's failures (a caller fails when its callee does): the
        # caller's weighs `symptom`.
        if degraded[name]:
            since = f" ({reason or 'change'} until {at:%H:%M:%S})" if at != first_at else ""
            callee = next((c for c in sorted(callees(job).get(name, ())) if degraded.get(c)), None)
            weight, note = (params.symptom, f" (so did {callee}, a changed callee)") if callee else (1.0, "")
            out.append((name, (weight * (CHANGE_SCORE + degraded[name]),
                               f"{first_reason or 'change'} at {first_at:%H:%M:%S} UTC{since}, then its service "
                               f"degraded{note}", "changes")))
    for name, (last, caller, what, onset, score) in _callers_failed_after(job, rows, params, found).items():
        # a changed service whose own telemetry did not move (a new version's pods may report nothing yet)
        # but whose caller began to fail right after its change, and after no nearer change of the caller
        # or of its other callees: the new version's answers are what the caller fails on
        if not degraded.get(name):
            _, _, first_at, first_reason = rows["changes"][name]
            since = f" (last at {last:%H:%M:%S})" if last != first_at else ""
            out.append((name, (params.symptom * (CHANGE_SCORE + score),
                               f"{first_reason or 'change'} at {first_at:%H:%M:%S} UTC{since}, then its caller "
                               f"{caller}'s {what} worsened from {onset:%H:%M}", "changes")))
    return out


def _callers_failed_after(job: Job, rows: dict, params: RankingParams, found: dict) -> dict[str, tuple]:
    """changed service -> (its latest change event before the failure, the caller, the caller's metric, the
    first sample of that metric beyond z_min floored deviations on its worse side, the caller's score for it),
    where of the caller's own service and its callees that changed, this one changed last at or before that
    sample's time (a cause precedes its effect; a sample may hold the minute before its stamp). The caller's
    strongest such series counts."""
    if not rows["changes"] or not job.rows.get("metrics"):
        return {}
    times = _change_times(job, rows["changes"])
    stats = {(e, m): (b, sd) for e, m, b, sd, *_ in rows["metrics"]}
    # the quality series that got worse, of entities with a changed callee: (entity, metric, its service,
    # the changed ones of it and its callees, the bounds its worse side crosses)
    worse = []
    unchanged_worse: dict[str, bool] = {}   # service -> an unchanged callee of it degraded on its own account
    for entity, metric, z, _, _, _, waiting, _ in metric_series(job, rows):
        b, sd = stats.get((entity, metric), (None, None))
        if b is None or abs(z) < params.z_min or not QUALITY.search(metric) or (z < 0) != higher_is_better(metric):
            continue
        ent = job.entities.get(entity)
        service = ent.service if ent and ent.kind == "pod" and ent.service else entity
        changed = [c for c in (service, *sorted(callees(job).get(service, ()))) if c in times]
        # a series that an unchanged callee's same failure explains is that callee's, not a change's; so is
        # one of a caller with an unchanged callee that degraded on its own account
        if service not in unchanged_worse:   # (since before the onset, too: that explains a caller as well)
            unchanged_worse[service] = any(own_worse(why, src, EXPLAINED_BY_OTHERS)
                                           for c in callees(job).get(service, ())
                                           if c not in times and c != service for _, why, src in found.get(c, []))
        explained = (waiting is not None and waiting not in changed) or unchanged_worse[service]
        if changed and changed != [service] and not explained:
            margin = params.z_min * max(sd or 0.0, floor(b, metric))
            low, high = (b - margin, math.inf) if higher_is_better(metric) else (-math.inf, b + margin)
            worse.append((entity, metric, service, changed, low, high, waiting))
    if not worse:
        return {}
    # each series' first window sample beyond its bounds, and its sampling step (the median gap), in one pass
    # (cached by series and bounds: the settings of a grid share most of them)
    known = job.cache.setdefault("first_beyond", {})
    todo = [w for w in worse if (w[0], w[1], w[4], w[5]) not in known]
    if todo:
        found_beyond = {(e, m): (t, step) for e, m, t, step in job.query(f"""
                WITH s AS (SELECT m.entity, m.metric, m.timestamp, m.value <= w.low OR m.value >= w.high AS beyond,
                                  epoch(m.timestamp) - epoch(lag(m.timestamp) OVER (PARTITION BY m.entity, m.metric
                                                                                    ORDER BY m.timestamp)) AS gap
                           FROM metrics m JOIN (SELECT unnest($entities) AS entity, unnest($metrics) AS metric,
                                                       unnest($lows) AS low, unnest($highs) AS high) w
                                USING (entity, metric)
                           WHERE {job.in_window('m.timestamp')})
                SELECT entity, metric, min(timestamp) FILTER (WHERE beyond), median(gap) FROM s GROUP BY 1, 2""",
                {"entities": [w[0] for w in todo], "metrics": [w[1] for w in todo],
                 "lows": [w[4] for w in todo], "highs": [w[5] for w in todo]})}
        known.update({(w[0], w[1], w[4], w[5]): found_beyond.get((w[0], w[1]), (None, None)) for w in todo})
    onsets = {(w[0], w[1]): known[w[0], w[1], w[4], w[5]] for w in worse}
    # a series sparser than the table's usual step (few requests) cannot date its failure closer than that
    usual = usual_step(job)
    first_change = {c: min(at) for c, at in times.items()}
    measured = _latency_measured(job, first_change) if any(LATENCY.search(w[1]) for w in worse) else set()
    out: dict[str, tuple] = {}
    for entity, metric, service, changed, _, _, waiting in worse:
        onset, step = onsets.get((entity, metric), (None, None))
        if onset is None:
            continue
        steps = [s for s in (step, usual) if s is not None]
        latest = {c: max(t for t in times[c] if t <= onset) for c in changed if min(times[c]) <= onset}
        nearest = max(latest, key=latest.get, default=service)
        # a new version fails its callers as soon as it serves: a caller that stayed healthy for a whole
        # sample after the change (its first failing sample two steps or more after it; the step no longer than
        # the table's usual one) failed for another reason, or one its sparse samples cannot tell
        if nearest == service or (steps and (onset - latest[nearest]).total_seconds() >= 2 * min(steps)):
            continue
        # a callee whose own latency was measured after its change, and did not rise (else it would have
        # degraded), did not slow its caller; a caller's errors may still be its doing (a wrong answer is
        # fast, and a success as the callee sees it)
        if LATENCY.search(metric) and nearest in measured:
            continue
        # its score for the series, unless something other than a changed callee explains it
        score = max((s for s, why, src in found.get(entity, []) if why.startswith(f"{metric} ")
                     and (own_worse(why, src) or WAITING.format(waiting).strip() in why)), default=0.0)
        if score > out.get(nearest, (0.0,))[-1]:
            out[nearest] = (latest[nearest], entity, metric, onset, score)
    return out


def _change_times(job: Job, changes: dict[str, tuple]) -> dict[str, list[dt.datetime]]:
    """changed service -> the times of its events from its first change to the window's end (its rollout's
    new pods' too). Cached: the ranking's settings do not change it, and a grid asks for it once each."""
    if "change_times" not in job.cache:
        times: dict[str, list] = defaultdict(list)
        for entity, at in job.query("SELECT entity, timestamp FROM events WHERE timestamp < $end",
                                    {"end": job.window.end}):
            ent = job.entities.get(entity)
            name = ent.service if ent and ent.kind == "pod" and ent.service in job.entities else entity
            if name in changes and at >= changes[name][2]:
                times[name].append(at)
        job.cache["change_times"] = times
    return job.cache["change_times"]


def _latency_measured(job: Job, first_change: dict[str, dt.datetime]) -> set[str]:
    """The changed services with a latency sample after their first change, of their own or of a pod first
    seen after it (the new version's; a pod the rollout had not replaced yet says nothing of it). Cached, as
    the change times it is given are."""
    if "latency_measured" in job.cache:
        return job.cache["latency_measured"]
    owner = {name: name for name in first_change} | {
        pod: ent.service for pod, ent in job.entities.items() if ent.kind == "pod" and ent.service in first_change}
    rows = job.query("""SELECT entity, min(timestamp), max(timestamp) FILTER (WHERE regexp_matches(metric, $latency))
                        FROM metrics WHERE entity IN (SELECT unnest($entities)) AND value IS NOT NULL
                          AND timestamp < $end GROUP BY 1""",
                     {"latency": LATENCY.pattern, "entities": sorted(owner), "end": job.window.end})
    job.cache["latency_measured"] = {owner[e] for e, first, last in rows
                                     if last is not None and last >= first_change[owner[e]]
                                     and (e == owner[e] or first >= first_change[owner[e]])}
    return job.cache["latency_measured"]
