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
  (the caller's side when it grew on most of one caller's calls, else the callee's); where the traces look
  sampled (most request ids of the log lines have no span), each weighs the square root of the share kept
  (a comparison of fewer calls is noisier);
- logs, per template: error-like lines beyond their share of the entity's own volume (less where they name
  another service: its failure as the entity saw it), a routine line that stopped or fell to a fraction of
  its share of the entity's lines (an exception thrown before it), and, where log lines carry trace ids, a
  routine line that the calls of an operation still arriving no longer write (per request, from the onset
  inside the window: a change of the mix of requests moves nothing); the error lines and the routine lines
  count as two sources of evidence (what the code now writes, what it no longer reaches);
- a caller that no longer calls (metrics and topology): two or more callees that only it calls stopped
  receiving requests while it still serves its own and none of its callees got worse (it fails before it
  calls them);
- changes (deployment, config push, scaling) followed by a degradation of the changed entity on its own
  account, or of a changed service's caller right after its change (harmless rollouts are the rule: one
  shortly before an unrelated fault must not take its place).
An entity with no sign of serving worse (only its resource use or its client-side view of others moved)
weighs less: load and its dependencies explain such moves. A signal the window already showed before the
onset found inside it weighs less: the baseline period differs from this day in more than the fault
(another mix of requests).
Rates are counts over the time a table recorded.
A service inherits its pods' metric and log signals. The metric signals are in metric_signals.py, the call and
gap signals in call_signals.py, the log signals in log_signals.py, the change signals in change_signals.py,
the caller that no longer calls in stopped_calls.py,
what a signal's reason says (serves worse, explained by another entity) in reasons.py. No system, dataset or
service is named in any of them (a test checks).
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
                                        requests_that_led, traffic_factor, typical_own_time)
from rcagent.tools.calls import edges
from rcagent.tools.change_signals import CHANGE_HORIZON_S, change_signals, latest_changes
from rcagent.tools.common import short
from rcagent.tools.log_signals import ROUTINE, log_rows, log_signals, request_line_rows, request_line_signals
from rcagent.tools.metric_signals import metric_rows, metric_signals
from rcagent.tools.reasons import PREEXISTING, client_side, worse_service
from rcagent.tools.stopped_calls import stopped_call_signals

LIMIT = 15
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
    rows: dict = {"metrics": metrics, "newborn": newborn, "calls": [], "own": {}, "own_typical": {}, "led": {},
                  "gaps": [], "peer_gaps": False, "callers": set()}
    if job.observed_seconds("traces", window=False) and job.observed_seconds("traces"):
        edges(job)
        win, base = job.in_window("start"), job.in_baseline("traces", "start")
        # the part before the onset (see _before_onset) is judged whole: an onset inside it is no incident's
        onset = (None if job.cache.get("part") else _onset_inside(job)) or job.window.start
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
        rows["own_typical"] = typical_own_time(job, onset, BUCKET_MIN)
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
    share = job.trace_share()
    if share is not None:
        # sampled traces: a call signal rests on the calls kept, and the noise of a comparison of a share k
        # of the calls grows as 1/sqrt(k), so it weighs sqrt(k) (chosen before measuring; a busy caller's
        # sampled noise otherwise outranks a culprit named by every log line and metric)
        for entity, sigs in found.items():
            found[entity] = [(s * math.sqrt(share), why, src) if src == "calls" else (s, why, src)
                             for s, why, src in sigs]
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
    for entity, signal in [*change_signals(job, rows, params, found), *stopped_call_signals(job, found)]:
        found[entity].append(signal)
    for entity in found:
        found[entity].sort(reverse=True)
    # the signal functions look entities up in `found`, which leaves an empty list for one with no signal
    job.cache[key] = {entity: sigs for entity, sigs in found.items() if sigs}
    return job.cache[key]


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
                                                                       if k in ("edges", "callees", "log_lines", "sampled_ids")} | {"part": True}))
            for entity, sigs in scores(part, replace(params, preexisting=1.0)).items():
                kinds = out.setdefault(entity, {})
                for s, why, _ in sigs:
                    kinds[_kind(why)] = max(s, kinds.get(_kind(why), 0.0))
        job.cache[key] = onset, out
    return job.cache[key]


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
        if not any(worse_service(why, src) and not client_side(why, src) for _, why, src in sigs):
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
