"""overview(kind?): every entity ranked by how far its telemetry moved from the baseline.

Signals, each turned into a comparable score (the mechanism of each is in the comment where it is scored):
- metrics: deviation in floored sigmas, the floor in the metric's unit, log-compressed; an improvement of a
  quality metric is no evidence; client-side measurements (and the users' entry point) weigh less, less
  again a client-side latency of an entity whose served latency did not rise; a latency that a callee's
  explains (times the calls to it per request), a success rate's fall (an error count's rise) that a
  callee's explains, or a latency that the entity's own time per call (traces) does not, weighs less; a
  pod with no history against its peers; without a baseline, a pod against its replicas
  and any other entity against the others of its kind (on a log scale, only above them);
- calls (traces): fewer incoming requests than the callers' own requests would have made, beyond Poisson
  chance (a service that stops receiving calls its callers still try to make ranks high; calls lost upstream
  and more calls are the callers' doing), slower p95 latency, typical from the onset on rather than a
  burst's (the median where a period has too few calls for a p95; less when the entity's own time per call
  did not grow; faster calls are no evidence), own time per call, error spans, a widened cross-span gap
  (the caller's side when it grew on most of one caller's calls, else the callee's);
- logs, per template: error-like lines beyond their share of the entity's own volume (less where they name
  another service: its failure as the entity saw it), a routine line that stopped or fell to a fraction of
  its share of the entity's lines (an exception thrown before it), and, where log lines carry trace ids, a
  routine line that the calls of an operation still arriving no longer write (per request, from the onset
  inside the window: a change of the mix of requests moves nothing); the error lines and the routine lines
  count as two sources of evidence (what the code now writes, what it no longer reaches);
- changes (deployment, config push, scaling) followed by a degradation of the changed entity on its own
  account (not one its callees, an earlier period or a shared fall of load explain; less when a changed
  callee degraded too), or, for a changed service whose own telemetry did not move, by a caller's failure
  that began within two samples of its change (samples no longer than the table's usual step), after no
  nearer change of the caller or its other callees, and that no unchanged callee's own degradation (in the
  window or already before its onset) explains (harmless rollouts are the rule: one shortly
  before an unrelated fault must not take its place; benchmarks/harmless_change.py measures it).
An entity with no sign of serving worse (only its resource use or its client-side view of others moved)
weighs less: load and its dependencies explain such moves. A signal the window already showed before the
onset found inside it weighs less: the baseline period differs from this day in more than the fault
(another mix of requests).
Rates are counts over the time a table recorded.
A service inherits its pods' metric and log signals. The metric signals are in metric_signals.py, the call and
gap signals in call_signals.py, the log signals in log_signals.py. No system, dataset or service is named in
any of them (a test checks).
"""
from __future__ import annotations

import datetime as dt
import math
import re
from collections import defaultdict
from dataclasses import dataclass, replace

from rcagent.errorlike import ERR
from rcagent.job import Job
from rcagent.onset import find_onset
from rcagent.tables import render_table
from rcagent.tools import Param, register
from rcagent.tools.call_signals import (LATENCY_CALLS, call_signals, gap_signals, own_time, peer_gap_signals,
                                        requests_that_led, traffic_factor)
from rcagent.tools.calls import edges
from rcagent.tools.common import floor, short
from rcagent.tools.log_signals import ROUTINE, log_rows, log_signals, request_line_rows, request_line_signals
from rcagent.tools.metric_signals import (LESS_LOAD, OWN_TIME_SAME, QUALITY, WAITING, callees, higher_is_better,
                                         metric_rows, metric_series, metric_signals)

LIMIT = 15


CHANGE = r"(?i)(deploy|rollout|roll-out|release|config|scal|upgrade|rollback)"   # what a change log calls a change
CHANGE_HORIZON_S = 600   # a change counts up to this long before the window (or the window's length, if longer)
PREEXISTING = " (already so before the onset at {:%H:%M:%S})"
# the notes of a signal that another entity explains, and of one that also the period before the onset showed
# (without what they fill in)
EXPLAINED_BY_OTHERS = tuple(note.split("{")[0].strip() for note in (WAITING, OWN_TIME_SAME, LESS_LOAD))
EXPLAINED = EXPLAINED_BY_OTHERS + (PREEXISTING.split("{")[0].strip(),)
CHANGE_SCORE = 60.0      # a changed entity that degraded after its change outranks symptoms (as an outage does)
BUCKET_MIN = 5           # a 30 s stretch of a callee's calls gives a p95 from this many calls
P95_CALLS = 20           # a p95 latency needs this many calls in each period (1 / (1 - 0.95)), else the median


@dataclass(frozen=True)
class RankingParams:
    """The overview's thresholds and weights, one place. The defaults were fixed by hand before any
    leave-one-system-out evaluation; `rcagent bench ranking` chooses among a small grid of them on the other
    systems and scores the held-out one."""
    z_min: float = 3.0          # a metric counts from this many (floored) sigmas off its baseline
    call_min: float = 5.0       # a call or log signal counts from this score (10 x |log2 ratio|, ...)
    client_weight: float = 0.5  # a client-side latency measures the entity's dependencies more than itself
    secondary: float = 0.25     # weight of an entity's second and further independent sources of evidence
    symptom: float = 0.5        # weight of a latency that its callees explain (the entity's own time did not grow)
    waiting: float = 0.5        # weight of a latency metric that rose no more than a callee's (topology)
    preexisting: float = 0.5    # weight of a signal the window already showed before the incident's onset
    resource_only: float = 0.5  # weight of an entity with no sign of serving worse (only resources, client side)
    line_fell: float = 0.5      # a routine log line counts when it fell to this share of its expected count
                                # (0: only when it stopped)
    shared: float = 0.5         # weight of a resource metric's fall most entities of its kind share (less load)


DEFAULT = RankingParams()


def _rows(job: Job) -> dict[str, list[tuple]]:
    """The aggregated telemetry the overview scores (no thresholds applied), computed once per job."""
    if "overview_rows" in job.cache:
        return job.cache["overview_rows"]
    metrics, newborn = metric_rows(job)
    rows: dict = {"metrics": metrics, "newborn": newborn, "calls": [], "own": {}, "led": {}, "gaps": [],
                  "peer_gaps": False, "callers": set()}
    if job.observed_seconds("traces", window=False) and job.observed_seconds("traces"):
        edges(job)
        win, base = job.in_window("start"), job.in_baseline("traces", "start")
        onset = _onset_inside(job) or job.window.start
        for level in ("callee", "callee_pod"):   # a column of the edges table
            calls = job.query(f"""
                    SELECT {level}, count(*) FILTER (WHERE {base}), count(*) FILTER (WHERE {win}),
                           count(*) FILTER (WHERE {win} AND {ERR}),
                           quantile_cont(duration_ms, 0.95) FILTER (WHERE {base}),
                           quantile_cont(duration_ms, 0.95) FILTER (WHERE {win}),
                           median(duration_ms) FILTER (WHERE {base}), median(duration_ms) FILTER (WHERE {win})
                    FROM edges WHERE {level} IS NOT NULL GROUP BY 1""")
            # the typical latency of the incident, not of its worst moments: the median of the 30 s p95s
            # from the onset on (a burst or two in an otherwise normal window, e.g. a periodic job, is not
            # a sustained change; a fault lasts from its onset)
            typical = dict(job.query(f"""
                    SELECT name, median(p95) FROM (
                        SELECT {level} AS name, quantile_cont(duration_ms, 0.95) AS p95
                        FROM edges WHERE {level} IS NOT NULL AND {win} AND start >= $onset
                        GROUP BY 1, time_bucket(INTERVAL 30 SECOND, start) HAVING count(*) >= $n)
                    GROUP BY 1""", {"onset": onset, "n": BUCKET_MIN}))
            rows["calls"] += [_latency(n, b, w, e, b95, w95 if w95 is None or typical.get(n) is None
                                       else min(w95, typical[n]), b50, w50)
                              for n, b, w, e, b95, w95, b50, w50 in calls]
        rows["own"] = own_time(job)
        rows["led"] = requests_that_led(job)
        rows["callers"] = {name for pair in job.query(f"SELECT DISTINCT caller, caller_pod FROM edges WHERE {win}")
                           for name in pair if name}
        for caller, callee in (("caller", "callee"), ("caller_pod", "callee_pod")):   # columns of edges
            rows["gaps"] += job.query(f"""
                    SELECT {caller}, {callee}, median(gap_ms) FILTER (WHERE {base}), median(gap_ms) FILTER (WHERE {win}),
                           count(gap_ms) FILTER (WHERE {win})
                    FROM edges WHERE {caller} IS NOT NULL AND {callee} IS NOT NULL AND gap_ms IS NOT NULL
                    GROUP BY 1, 2""")
        # the traces' only baseline is the window's part before the onset (or none), which may hold the
        # fault already: their callees are also compared with each other
        rows["peer_gaps"] = not any("traces" in p.tables for p in job.baseline if p is not job.onset)
    # changes (deployments, config pushes, scaling) in the window or shortly before it
    rows["changes"] = latest_changes(
        job, since=job.window.start - dt.timedelta(seconds=max(job.window.seconds, CHANGE_HORIZON_S)))
    rows["logs"] = log_rows(job)
    # calls that no longer write a line: judged from the onset inside the window (a comparison per request,
    # which the mix of requests in the window's first part does not blur)
    since = None if job.cache.get("part") else _onset_inside(job)
    rows["request_lines"] = request_line_rows(job, since)
    rows["request_lines_min"] = (replace(job, window=replace(job.window, start=since), cache={})
                                 if since else job).observed_seconds("logs") / 60
    job.cache["overview_rows"] = rows
    return rows


def _latency(name, b, w, err, b95, w95, b50, w50) -> tuple:
    """A callee's call row with the latency quantile its call counts support: (name, baseline calls, window
    calls, error spans, baseline latency, window latency, quantile). A p95 of fewer than P95_CALLS calls is
    the slowest call or two (one slow call in a dozen is no change): the median then; with fewer than
    LATENCY_CALLS calls in either period, none."""
    if min(b, w) >= P95_CALLS:
        return name, b, w, err, b95, w95, "p95"
    if min(b, w) >= LATENCY_CALLS:
        return name, b, w, err, b50, w50, "p50"
    return name, b, w, err, None, None, "p95"


def scores(job: Job, params: RankingParams = DEFAULT) -> dict[str, list[tuple[float, str, str]]]:
    """entity -> [(score, reason, source)], best first; source is metrics, calls, logs or changes. Cached on
    the job."""
    key = ("overview", params)
    if key in job.cache:
        return job.cache[key]
    rows = _rows(job)
    found: dict[str, list[tuple[float, str, str]]] = defaultdict(list)
    for source in (metric_signals(job, rows, params), call_signals(job, rows, params), gap_signals(rows, params),
                   peer_gap_signals(rows, params),
                   log_signals(rows["logs"], traffic_factor(job) * job.observed_seconds("logs", window=False) / 60,
                               job.observed_seconds("logs") / 60, params),
                   request_line_signals(rows["request_lines"], rows["request_lines_min"], params)):
        for entity, signal in source:
            found[entity].append(signal)
    if params.preexisting != 1.0:
        onset, before = _before_onset(job, params)
        for entity, sigs in found.items():
            # a deviation the window already showed before the incident's onset, about as strongly, is a
            # difference between the baseline period and this day (another mix of requests), not the fault
            pre = before.get(entity, {})
            found[entity] = [(s * params.preexisting, why + PREEXISTING.format(onset), src)
                             if pre.get(_kind(why), -math.inf) >= 0.5 * s else (s, why, src) for s, why, src in sigs]
    for entity in list(found):
        # Services inherit their pods' metric and log signals (their call signals are computed per service
        # already, so inheriting those would count them twice); nodes are kept separate.
        found[entity].sort(reverse=True)
        ent = job.entities.get(entity)
        if ent and ent.kind == "pod" and ent.service and ent.service != entity:
            found[ent.service].extend((s, f"{r} ({entity})", src) for s, r, src in found[entity]
                                      if src != "calls")
    degraded = {name: max((s for s, why, src in found.get(name, []) if _own_worse(why, src)), default=0.0)
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
            found[name].append((weight * (CHANGE_SCORE + degraded[name]),
                                f"{first_reason or 'change'} at {first_at:%H:%M:%S} UTC{since}, then its service "
                                f"degraded{note}", "changes"))
    for name, (last, caller, what, onset, score) in _callers_failed_after(job, rows, params, found).items():
        # a changed service whose own telemetry did not move (a new version's pods may report nothing yet)
        # but whose caller began to fail right after its change, and after no nearer change of the caller
        # or of its other callees: the new version's answers are what the caller fails on
        if not degraded.get(name):
            _, _, first_at, first_reason = rows["changes"][name]
            since = f" (last at {last:%H:%M:%S})" if last != first_at else ""
            found[name].append((params.symptom * (CHANGE_SCORE + score),
                                f"{first_reason or 'change'} at {first_at:%H:%M:%S} UTC{since}, then its caller "
                                f"{caller}'s {what} worsened from {onset:%H:%M}", "changes"))
    for entity in found:
        found[entity].sort(reverse=True)
    job.cache[key] = dict(found)
    return job.cache[key]


def _callers_failed_after(job: Job, rows: dict, params: RankingParams, found: dict) -> dict[str, tuple]:
    """changed service -> (its latest change event before the failure, the caller, the caller's metric, the
    first sample of that metric beyond z_min floored deviations on its worse side, the caller's score for it),
    where of the caller's own service and its callees that changed, this one changed last at or before that
    sample's time (a cause precedes its effect; a sample may hold the minute before its stamp). The caller's
    strongest such series counts."""
    if not rows["changes"] or not job.rows.get("metrics"):
        return {}
    times: dict[str, list] = defaultdict(list)   # every event of a changed service (its rollout's new pods)
    for entity, at in job.query("SELECT entity, timestamp FROM events WHERE timestamp < $end", {"end": job.window.end}):
        ent = job.entities.get(entity)
        name = ent.service if ent and ent.kind == "pod" and ent.service in job.entities else entity
        if name in rows["changes"] and at >= rows["changes"][name][2]:
            times[name].append(at)
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
            unchanged_worse[service] = any(_own_worse(why, src, EXPLAINED_BY_OTHERS)
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
    onsets = {(e, m): (t, step) for e, m, t, step in job.query(f"""
            WITH s AS (SELECT m.entity, m.metric, m.timestamp, m.value <= w.low OR m.value >= w.high AS beyond,
                              epoch(m.timestamp) - epoch(lag(m.timestamp) OVER (PARTITION BY m.entity, m.metric
                                                                                ORDER BY m.timestamp)) AS gap
                       FROM metrics m JOIN (SELECT unnest($entities) AS entity, unnest($metrics) AS metric,
                                                   unnest($lows) AS low, unnest($highs) AS high) w
                            USING (entity, metric)
                       WHERE {job.in_window('m.timestamp')})
            SELECT entity, metric, min(timestamp) FILTER (WHERE beyond), median(gap) FROM s GROUP BY 1, 2""",
            {"entities": [w[0] for w in worse], "metrics": [w[1] for w in worse],
             "lows": [w[4] for w in worse], "highs": [w[5] for w in worse]})}
    # the table's usual sampling step: a series sparser than that (few requests) cannot date its failure closer
    usual = job.query(f"""SELECT mode(step) FROM (SELECT median(gap) AS step FROM (
                              SELECT entity, metric, epoch(timestamp) - epoch(lag(timestamp) OVER (
                                         PARTITION BY entity, metric ORDER BY timestamp)) AS gap
                              FROM metrics WHERE {job.in_window()}) GROUP BY entity, metric)""")[0][0]
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
        # its score for the series, unless something other than a changed callee explains it
        score = max((s for s, why, src in found.get(entity, []) if why.startswith(f"{metric} ")
                     and (_own_worse(why, src) or WAITING.format(waiting).strip() in why)), default=0.0)
        if score > out.get(nearest, (0.0,))[-1]:
            out[nearest] = (latest[nearest], entity, metric, onset, score)
    return out


def _kind(reason: str) -> str:
    """What a signal measures, without its numbers: "latency p95 8->72 ms" -> "latency p"."""
    return re.match(r"[^0-9]*", reason).group(0)


def _onset_inside(job: Job) -> dt.datetime | None:
    """The onset found inside the window of a job that came with a baseline (None otherwise). Cached."""
    if "onset_inside" not in job.cache:
        job.cache["onset_inside"] = find_onset(job) if job.onset is None and job.baseline else None
    return job.cache["onset_inside"]


def _before_onset(job: Job, params: RankingParams) -> tuple[dt.datetime | None, dict[str, dict[str, float]]]:
    """The onset found inside the window, and entity -> {signal kind: score} of the window's part before it,
    against the same baseline; (None, {}) when the job was split at its onset already (it came without a
    baseline) or no onset is found."""
    key = ("before_onset", params)
    if key not in job.cache:
        out: dict[str, dict[str, float]] = {}
        onset = _onset_inside(job)
        if onset is not None:
            # the same job seen up to the onset, with a cache of its own (its rows are aggregated once,
            # whatever the parameters)
            part = replace(job, window=replace(job.window, end=onset),
                           cache=job.cache.setdefault("before_onset", {k: v for k, v in job.cache.items()
                                                                       if k in ("edges", "callees", "log_lines")} | {"part": True}))
            for entity, sigs in scores(part, replace(params, preexisting=1.0)).items():
                kinds = out.setdefault(entity, {})
                for s, why, _ in sigs:
                    kinds[_kind(why)] = max(s, kinds.get(_kind(why), 0.0))
        job.cache[key] = onset, out
    return job.cache[key]


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




def _worse_service(reason: str, source: str) -> bool:
    """A signal that says the entity serves worse: call, log and change signals (a change signal exists only
    with a degradation after the change), and quality metrics (success rates down; error rates, latency up),
    not resource metrics."""
    if source in ("calls", "logs", "changes"):
        return True
    if source != "metrics" or not QUALITY.search(reason):
        return False
    return (" down " in reason) == higher_is_better(reason)


def _own_worse(reason: str, source: str, explained: tuple[str, ...] = EXPLAINED) -> bool:
    """A signal that the entity serves worse on its own account: not one the ranking already explains by
    something else (a callee it waits on or fails by, its own time that did not grow, a state it was in
    before the onset, less load that most of its kind shared)."""
    return _worse_service(reason, source) and not any(note in reason for note in explained)


def _client_side(reason: str, source: str) -> bool:
    """A metric signal of a client-side measurement (what the entity saw of its dependencies)."""
    metric = re.match(r"(.*?) (up|down) [0-9]", reason)
    return source == "metrics" and metric is not None and "client" in metric.group(1).lower()


def ranking(job: Job, kind: str | None = None,
            params: RankingParams = DEFAULT) -> list[tuple[str, float, list[str]]]:
    """[(entity, score, reasons)] of inventory entities, most anomalous first."""
    out = []
    for entity, sigs in scores(job, params).items():
        ent = job.entities.get(entity)
        if ent is None or (kind and ent.kind != kind):
            continue
        # Independent evidence (metrics, calls, logs) makes an entity more suspicious than one strong
        # signal; correlated signals of one source (p90/p95/p99 of the same latency) count once. Of the
        # logs, the lines that appeared (error lines) and the routine lines that no longer appear (stopped,
        # fell) are two observations of the code path, as a failing call and a thrown error are: each counts.
        best: dict[str, float] = {}
        for s, why, src in sigs:
            key = "logs, routine" if src == "logs" and why.startswith(ROUTINE) else src
            best[key] = max(best.get(key, 0.0), s)
        top = sorted(best.values(), reverse=True)
        score = top[0] + params.secondary * sum(top[1:])
        if not any(_worse_service(why, src) and not _client_side(why, src) for _, why, src in sigs):
            # no sign that it serves worse (no errors, latency of its own, failing or missing calls, error
            # logs): its resource use or its view of its dependencies moved, which load and callees explain
            score *= params.resource_only
        out.append((entity, round(score, 1), [r for _, r, _ in sigs[:3]]))
    # Ties are broken by name: DuckDB's GROUP BY returns groups in no fixed order, and the ranking must
    # not depend on it (a job, a model and a seed give the same run).
    out.sort(key=lambda r: (-r[1], r[0]))
    return out


@register("overview", "All entities ranked by how far their telemetry moved from the baseline "
          "(metrics, request rates including calls that stopped, latency, cross-span gap, error logs)",
          Param("kind", "only this kind of entity", required=False,
                choices=("service", "pod", "node", "database", "function", "entry")))
def overview(job: Job, kind: str | None = None) -> str:
    ranked = ranking(job, kind)
    changes = _changes_text(job)
    if not ranked:
        return changes + "No entity moved noticeably from its baseline."
    rows = [[i + 1, e, job.entities[e].kind, f"{s:.0f}", "; ".join(r)] for i, (e, s, r) in enumerate(ranked[:LIMIT])]
    # changes first: a long overview reaches the prompt as its head (OBSK)
    text = changes + ("Entities ranked by how far they stand from their peers (no baseline, and no onset inside "
                      "the window):\n" if "metrics" in job.without_history() else
                      "Entities ranked by anomaly score (higher = moved more from baseline):\n")
    load = traffic_factor(job)
    if abs(load - 1) > 0.2:
        text = (f"User traffic in the window is {load:.1f}x the baseline; call and error rates are compared "
                "with the baseline scaled by it.\n" + text)
    text += render_table(
        ["#", "entity", "kind", "score", "top signals"], rows)
    quiet = len(job.entities) - len(ranked)
    if quiet > 0 and not kind:
        text += f"\n{quiet} other entities show no notable change."
    return text


def _changes_text(job: Job) -> str:
    """Every change in or shortly before the window, degraded after it or not (most are harmless; the
    ranking above says which were followed by a worse service)."""
    changes = sorted(_rows(job)["changes"].items(), key=lambda kv: (kv[1][2], kv[0]))
    if not changes:
        return ""
    parts = [f"{name} {short(first_reason or 'change', 40)} at {first_at:%H:%M:%S}"
             + (f" (until {at:%H:%M:%S})" if at != first_at else "")
             for name, (at, _, first_at, first_reason) in changes[:LIMIT]]
    more = f"; and {len(changes) - LIMIT} more" if len(changes) > LIMIT else ""
    return "Changes in or shortly before the window (UTC): " + "; ".join(parts) + more + ".\n"
