"""overview(kind?): every entity ranked by how far its telemetry moved from the baseline.

Signals, each turned into a comparable score (the mechanism of each is in the comment where it is scored):
- metrics: deviation in floored sigmas, the floor in the metric's unit, log-compressed; an improvement of a
  quality metric is no evidence; client-side measurements (and the users' entry point) weigh less, less
  again a client-side latency of an entity whose served latency did not rise; a latency that a callee's
  explains (times the calls to it per request), or that the entity's own time per call (traces) does not,
  weighs less; a pod with no history against its peers; without a baseline, a pod against its replicas
  and any other entity against the others of its kind (on a log scale, only above them);
- calls (traces): fewer incoming requests than the callers' own requests would have made, beyond Poisson
  chance (a service that stops receiving calls its callers still try to make ranks high; calls lost upstream
  and more calls are the callers' doing), slower p95 latency, typical from the onset on rather than a
  burst's (the median where a period has too few calls for a p95; less when the entity's own time per call
  did not grow; faster calls are no evidence), own time per call, error spans, a widened cross-span gap
  (the caller's side when it grew on most of one caller's calls, else the callee's);
- logs, per template: error-like lines beyond their share of the entity's own volume (less where they name
  another service: its failure as the entity saw it), a routine line that stopped or fell to a fraction of
  its share of the entity's lines (an exception thrown before it);
- changes (deployment, config push, scaling) followed by a degradation of the changed entity (less when a
  changed callee degraded too).
An entity with no sign of serving worse (only its resource use or its client-side view of others moved)
weighs less: load and its dependencies explain such moves. A signal the window already showed before the
onset found inside it weighs less: the baseline period differs from this day in more than the fault
(another mix of requests).
Rates are counts over the time a table recorded.
A service inherits its pods' metric and log signals. The call and gap signals are in call_signals.py, the log
signals in log_signals.py. No system, dataset or service is named in any of them (a test checks).
"""
from __future__ import annotations

import datetime as dt
import math
import re
import statistics
from collections import defaultdict
from dataclasses import dataclass, replace

from rcagent.errorlike import ERR
from rcagent.job import Job
from rcagent.onset import find_onset
from rcagent.tables import render_table
from rcagent.tools import Param, register
from rcagent.tools.call_signals import (LATENCY_CALLS, call_signals, gap_signals, own_time, own_time_rose,
                                        requests_that_led, traffic_factor, waits)
from rcagent.tools.calls import edges
from rcagent.tools.common import deviation, floor, second, short
from rcagent.tools.log_signals import log_rows, log_signals

LIMIT = 15


CHANGE = r"(?i)(deploy|rollout|roll-out|release|config|scal|upgrade|rollback)"   # what a change log calls a change
CHANGE_HORIZON_S = 600   # a change counts up to this long before the window (or the window's length, if longer)
CHANGE_SCORE = 60.0      # a changed entity that degraded after its change outranks symptoms (as an outage does)
PEERS_MIN = 3            # pods of one service with the same metric needed to compare one with the others
KIND_PEERS_MIN = 5       # ... and entities of one kind (services, databases) for one of them with the others
KIND_Z_MIN = 1.0         # an entity counts from one spread above the others of its kind (a log scale)
REPLICAS = "its replicas"   # what a pod is compared with (peer_outliers)
WAIT_SHARE = 0.8         # a caller waits on a callee whose same latency rose by this share of the caller's rise
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
SHARED_MIN = 3           # a fall shared by fewer entities than this is not taken for less load


def _rows(job: Job) -> dict[str, list[tuple]]:
    """The aggregated telemetry the overview scores (no thresholds applied), computed once per job."""
    if "overview_rows" in job.cache:
        return job.cache["overview_rows"]
    rows: dict = {"metrics": [], "calls": [], "logs": [], "newborn": [], "own": {}, "led": {}, "gaps": [],
                  "callers": set()}
    if job.rows.get("metrics") and job.rows.get("entities"):
        # pods with no baseline samples of a metric (born after it, e.g. by a rollout): their window
        # against the baseline of the other pods of their service (the peers they join or replace)
        base, win = job.in_baseline("metrics"), job.in_window()
        rows["newborn"] = job.query(f"""
                WITH pods AS (SELECT id, service FROM entities WHERE kind = 'pod' AND service IS NOT NULL),
                     own AS (SELECT m.entity, p.service, m.metric, count(value) FILTER (WHERE {base}) AS b_n,
                                    min(value, 2) FILTER (WHERE {win}) AS lo, max(value, 2) FILTER (WHERE {win}) AS hi
                             FROM metrics m JOIN pods p ON m.entity = p.id GROUP BY ALL),
                     peers AS (SELECT p.service, m.metric, avg(value) AS b_mean, stddev_samp(value) AS b_sd
                               FROM metrics m JOIN pods p ON m.entity = p.id WHERE {base} GROUP BY ALL)
                SELECT own.entity, own.metric, peers.b_mean, peers.b_sd, own.lo, own.hi
                FROM own JOIN peers USING (service, metric) WHERE own.b_n = 0 AND own.hi IS NOT NULL""")
    if job.rows.get("metrics"):
        rows["metrics"] = job.query(f"""
                SELECT entity, metric, avg(value) FILTER (WHERE {job.in_baseline('metrics')}),
                       stddev_samp(value) FILTER (WHERE {job.in_baseline('metrics')}),
                       min(value, 2) FILTER (WHERE {job.in_window()}), max(value, 2) FILTER (WHERE {job.in_window()})
                FROM metrics GROUP BY ALL""")
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
                    SELECT {caller}, {callee}, median(gap_ms) FILTER (WHERE {base}), median(gap_ms) FILTER (WHERE {win})
                    FROM edges WHERE {caller} IS NOT NULL AND {callee} IS NOT NULL AND gap_ms IS NOT NULL
                    GROUP BY 1, 2""")
    # changes (deployments, config pushes, scaling) in the window or shortly before it
    rows["changes"] = latest_changes(
        job, since=job.window.start - dt.timedelta(seconds=max(job.window.seconds, CHANGE_HORIZON_S)))
    rows["logs"] = log_rows(job)
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
    for source in (_metric_signals(job, rows, params), call_signals(job, rows, params), gap_signals(rows, params),
                   log_signals(rows["logs"], traffic_factor(job) * job.observed_seconds("logs", window=False) / 60,
                               job.observed_seconds("logs") / 60, params)):
        for entity, signal in source:
            found[entity].append(signal)
    if params.preexisting != 1.0:
        onset, before = _before_onset(job, params)
        for entity, sigs in found.items():
            # a deviation the window already showed before the incident's onset, about as strongly, is a
            # difference between the baseline period and this day (another mix of requests), not the fault
            pre = before.get(entity, {})
            found[entity] = [(s * params.preexisting, f"{why} (already so before the onset at {onset:%H:%M:%S})", src)
                             if pre.get(_kind(why), -math.inf) >= 0.5 * s else (s, why, src) for s, why, src in sigs]
    for entity in list(found):
        # Services inherit their pods' metric and log signals (their call signals are computed per service
        # already, so inheriting those would count them twice); nodes are kept separate.
        found[entity].sort(reverse=True)
        ent = job.entities.get(entity)
        if ent and ent.kind == "pod" and ent.service and ent.service != entity:
            found[ent.service].extend((s, f"{r} ({entity})", src) for s, r, src in found[entity]
                                      if src != "calls")
    degraded = {name: max((s for s, why, src in found.get(name, []) if _worse_service(why, src)), default=0.0)
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
            callee = next((c for c in sorted(_callees(job).get(name, ())) if degraded.get(c)), None)
            weight, note = (params.symptom, f" (so did {callee}, a changed callee)") if callee else (1.0, "")
            found[name].append((weight * (CHANGE_SCORE + degraded[name]),
                                f"{first_reason or 'change'} at {first_at:%H:%M:%S} UTC{since}, then its service "
                                f"degraded{note}", "changes"))
    for entity in found:
        found[entity].sort(reverse=True)
    job.cache[key] = dict(found)
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
                                                                       if k in ("edges", "callees")}))
            for entity, sigs in scores(part, replace(params, preexisting=1.0)).items():
                kinds = out.setdefault(entity, {})
                for s, why, _ in sigs:
                    kinds[_kind(why)] = max(s, kinds.get(_kind(why), 0.0))
        job.cache[key] = onset, out
    return job.cache[key]


def _metric_series(job: Job, rows: dict) -> list[tuple]:
    """Per metric series, what does not depend on the parameters: (entity, metric, z, note, latency?,
    client-side?, the callee whose rise explains its own or None, a served-side latency with a baseline?).
    Cached on the job."""
    if "metric_series" in job.cache:
        return job.cache["metric_series"]
    rises: dict[tuple[str, str], float] = {}
    for e, m, b, _, _, hi in rows["metrics"]:
        if b is not None and hi and LATENCY.search(m):
            rises[(e, m)] = second(hi) - b
            # a service's rise is its most risen pod's (the topology names services, metrics pods)
            name = _service_of(job, e)
            rises[(name, m)] = max(rises.get((name, m), -math.inf), second(hi) - b)
    fanout = _fanout(job)
    newborn = [(e, m, b, sd, lo, hi, " against its peers (no history of its own)") for e, m, b, sd, lo, hi
               in rows["newborn"]]
    out = []
    for entity, metric, b_mean, b_sd, w_low, w_high, note in [(*r, "") for r in rows["metrics"]] + newborn:
        z = deviation(b_mean, b_sd, second(w_low), second(w_high), metric)
        latency = LATENCY.search(metric) is not None
        # a client-side measurement (a client latency metric, or any metric of an external endpoint, which
        # only its callers observe, or of the users' entry point, which measures the whole system from
        # outside) says as much about the callee side as about the entity
        ent = job.entities.get(entity)
        client = "client" in metric.lower() or (ent is not None and ent.kind in ("external", "entry"))
        # a latency that rose no more than a callee's same latency (times the calls to it per request: a
        # caller that calls it in a loop waits that many times) is time spent waiting on that callee
        rise, name = rises.get((entity, metric), 0.0), _service_of(job, entity)
        waiting = None
        if z > 0 and rise > 0 and note == "":
            waiting = next((c for c in sorted(_callees(job).get(name, set()) | _callees(job).get(entity, set()))
                            if rises.get((c, metric), 0.0) * fanout.get((name, c), 1.0) >= WAIT_SHARE * rise), None)
        served = latency and "client" not in metric.lower() and b_mean is not None and not note
        out.append((entity, metric, z, note, latency, client, waiting, served))
    job.cache["metric_series"] = out
    return out


def _metric_signals(job: Job, rows: dict, params: RankingParams):
    """(entity, signal) from its metrics: each series' deviation from its baseline (or, for a pod with no
    history, from its peers'; without a baseline, from its replicas or the others of its kind)."""
    series = _metric_series(job, rows)
    own = {name: own_time_rose(rows, name, b, w, params) for name, b, w, *_ in rows["calls"]}
    # entities with a served-side latency series (not client-side), and those whose served latency rose
    served, served_rose = set(), set()
    for entity, _, z, _, _, _, _, served_side in series:
        if served_side:
            served.add(entity)
            if z >= params.z_min:
                served_rose.add(entity)
    shared = _shared_falls(job, series, params.z_min)
    for entity, metric, z, note, latency, client, waiting, _ in series:
        if abs(z) < params.z_min or _better(metric, z):
            continue
        weight = params.client_weight if client else 1.0
        if (entity, metric) in shared:
            weight *= params.shared
            note += " (as most of its kind: less load)"
        if client and latency and entity in served and entity not in served_rose:
            # its calls to its dependencies got slower but the requests it serves did not: background or
            # asynchronous work (a sparse series' quantile is one slow call), not what its users wait on
            weight *= params.client_weight
        if waiting:
            weight *= params.waiting
        elif z > 0 and latency and not client and waits(rows, entity, own.get(entity)):
            # its requests got slower but the time it spends itself did not (traces): it waits on callees
            weight *= params.symptom
            note += " (its own time per call did not grow)"
        yield entity, (weight * 6 * math.log2(1 + abs(z) / 3),
                       f"{metric} {'up' if z > 0 else 'down'} {abs(z):.0f} sd{note}"
                       + (f" (as much as its callee {waiting})" if waiting else ""), "metrics")
    if (job.onset is not None and "metrics" in job.onset.tables) or "metrics" in job.without_history():
        # no fault-free baseline came with the job: an entity far from its peers on the same metric stands
        # out although its own history is unknown
        for entity, metric, z, peers in peer_outliers(job):
            if abs(z) >= (params.z_min if peers == REPLICAS else KIND_Z_MIN) and not _better(metric, z):
                yield entity, (6 * math.log2(1 + abs(z) / 3), f"{metric} {z:+.0f} sd off {peers} (no baseline)",
                               "metrics")


def _shared_falls(job: Job, series: list[tuple], z_min: float) -> set[tuple[str, str]]:
    """(entity, resource metric) of a fall that at least half of the entities of its kind carrying the metric,
    and at least SHARED_MIN of them, share: less load arrived, which none of them caused. (A shared rise is
    kept: a fault's extra work, retries and neighbours of a hog, spreads too.)"""
    carriers: dict[tuple, set[str]] = defaultdict(set)
    fell: dict[tuple, set[str]] = defaultdict(set)
    for entity, metric, z, *_ in series:
        if QUALITY.search(metric):
            continue
        ent = job.entities.get(entity)
        key = (ent.kind if ent is not None else None, metric)
        carriers[key].add(entity)
        if z <= -z_min:
            fell[key].add(entity)
    return {(entity, metric) for (kind, metric), who in fell.items()
            if len(who) >= SHARED_MIN and 2 * len(who) >= len(carriers[kind, metric]) for entity in who}


def _service_of(job: Job, name: str) -> str:
    ent = job.entities.get(name)
    return ent.service if ent is not None and ent.kind == "pod" and ent.service else name


def _fanout(job: Job) -> dict[tuple[str, str], float]:
    """(caller service, callee service) -> the callee's calls per caller request that calls it at all, in
    the window's traces (1 where there are none)."""
    if "fanout" not in job.cache:
        job.cache["fanout"] = {}
        if job.observed_seconds("traces"):
            edges(job)
            job.cache["fanout"] = {(a, b): n for a, b, n in job.query(f"""
                    SELECT caller, callee, count(*) / count(DISTINCT trace_id) FROM edges
                    WHERE {job.in_window("start")} AND caller <> '(entry)' GROUP BY ALL""")}
    return job.cache["fanout"]


def _callees(job: Job) -> dict[str, set[str]]:
    """caller -> the entities it calls, from the topology (relations of a calls kind). Cached on the job."""
    if "callees" not in job.cache:
        out: dict[str, set[str]] = defaultdict(set)
        if job.rows.get("relations"):
            for src, dst in job.query("SELECT src, dst FROM relations WHERE lower(kind) LIKE 'call%'"):
                if src != dst:
                    out[src].add(dst)
        job.cache["callees"] = out
    return job.cache["callees"]


def peer_outliers(job: Job) -> list[tuple[str, str, float, str]]:
    """(entity, metric, robust z, what it was compared with) of each entity's window mean against its peers.
    A pod against the other pods of its service (replicas should behave alike): (value - median) /
    (1.4826 x MAD), the spread floored in the metric's unit. Any other entity against the others of its
    kind (services against services), whose normal levels differ by multiples: on a log scale (log2 of the
    level plus the metric's floor), against the others' median and spread without it (an outlier must not
    widen the spread it is judged by), the spread floored at a factor of 2, and only a level above theirs
    counts (a small service is not a sick one). Cached on the job."""
    if "peer_outliers" in job.cache:
        return job.cache["peer_outliers"]
    rows = job.query(f"SELECT entity, metric, avg(value) FROM metrics WHERE {job.in_window()} GROUP BY ALL") \
        if job.rows.get("metrics") else []
    replicas: dict[tuple, list] = defaultdict(list)
    kinds: dict[tuple, list] = defaultdict(list)
    for entity, metric, value in rows:
        ent = job.entities.get(entity)
        if ent is None or value is None:
            continue
        if ent.kind == "pod" and ent.service:
            replicas[(ent.service, metric)].append((entity, value))
        elif ent.kind != "pod":
            kinds[(ent.kind, metric)].append((entity, value))
    out = []
    for (_, metric), members in replicas.items():
        if len(members) < PEERS_MIN:
            continue
        values = sorted(v for _, v in members)
        median = statistics.median(values)
        mad = statistics.median(abs(v - median) for v in values)
        spread = max(1.4826 * mad, floor(median, metric))
        out += [(entity, metric, (value - median) / spread, REPLICAS) for entity, value in members]
    for (kind, metric), members in kinds.items():
        if len(members) < KIND_PEERS_MIN or any(v < 0 for _, v in members):
            continue
        unit = floor(statistics.median(v for _, v in members), metric)
        levels = [math.log2(v + unit) for _, v in members]
        for i, (entity, _) in enumerate(members):
            others = levels[:i] + levels[i + 1:]
            median = statistics.median(others)
            spread = max(1.4826 * statistics.median(abs(x - median) for x in others), 1.0)
            if levels[i] > median:
                out.append((entity, metric, (levels[i] - median) / spread, f"the other {kind}s"))
    job.cache["peer_outliers"] = out
    return out


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


LATENCY = re.compile(r"(?i)(latency|duration|response.?time)")
QUALITY = re.compile(r"(?i)(success|error|fail|latency|timeout|availab|status)")


def _higher_is_better(metric: str) -> bool:
    """A quality metric where more is better (a success rate, availability), not worse (errors, latency)."""
    return re.search(r"(?i)(success|availab)", metric) is not None


def _worse_service(reason: str, source: str) -> bool:
    """A signal that says the entity serves worse: call and log signals, and quality metrics (success
    rates down; error rates, latency up), not resource metrics."""
    if source in ("calls", "logs"):
        return True
    if source != "metrics" or not QUALITY.search(reason):
        return False
    return (" down " in reason) == _higher_is_better(reason)


def _client_side(reason: str, source: str) -> bool:
    """A metric signal of a client-side measurement (what the entity saw of its dependencies)."""
    metric = re.match(r"(.*?) (up|down) [0-9]", reason)
    return source == "metrics" and metric is not None and "client" in metric.group(1).lower()


def _better(metric: str, z: float) -> bool:
    """A quality metric that moved the good way (a success rate or availability up; errors, failures,
    latency down): an improvement is no evidence of a fault."""
    return QUALITY.search(metric) is not None and (z > 0) == _higher_is_better(metric)


def ranking(job: Job, kind: str | None = None,
            params: RankingParams = DEFAULT) -> list[tuple[str, float, list[str]]]:
    """[(entity, score, reasons)] of inventory entities, most anomalous first."""
    out = []
    for entity, sigs in scores(job, params).items():
        ent = job.entities.get(entity)
        if ent is None or (kind and ent.kind != kind):
            continue
        # Independent evidence (metrics, calls, logs) makes an entity more suspicious than one strong
        # signal; correlated signals of one source (p90/p95/p99 of the same latency) count once.
        best: dict[str, float] = {}
        for s, _, src in sigs:
            best[src] = max(best.get(src, 0.0), s)
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
