"""The overview's metric signals: each series' deviation from its baseline in floored sigmas (tools.common.
deviation), weighed by what it measures (client side; a latency, success rate or error count that got no
worse than a callee's same metric: waiting on it, failing by it; a fall of resource use most of a kind share;
an entity whose own time did not grow; a count of calls that began from none is no change of the entity's;
a success rate over a known count of requests has the binomial spread of that count, and a latency
quantile of fewer requests than it needs is one request's time),
a pod with no history against its peers, and, without a baseline, a pod against its replicas and any other
entity against the others of its kind. No system, dataset or service is named here (a test checks)."""
from __future__ import annotations

import math
import statistics
from collections import defaultdict
from typing import TYPE_CHECKING

from rcagent.job import Job
from rcagent.tools.call_signals import own_time_rose, waits
from rcagent.tools.calls import edges
from rcagent.tools.common import COUNT, LATENCY, QUALITY, RATE, floor, second, series_deviation, too_few

if TYPE_CHECKING:
    from rcagent.tools.overview import RankingParams

PEERS_MIN = 3            # pods of one service with the same metric needed to compare one with the others
KIND_PEERS_MIN = 5       # ... and entities of one kind (services, databases) for one of them with the others
KIND_Z_MIN = 1.0         # an entity counts from one spread above the others of its kind (a log scale)
REPLICAS = "its replicas"   # what a pod is compared with (peer_outliers)
WAIT_SHARE = 0.8         # a caller waits on (fails by) a callee whose same metric got worse by this share of its own
SHARED_MIN = 3           # a fall shared by fewer entities than this is not taken for less load

# the notes of a signal that something else explains (tools.reasons reads them back)
LESS_LOAD = " (as most of its kind: less load)"
OWN_TIME_SAME = " (its own time per call did not grow)"
WAITING = " (as much as its callee {})"


def metric_rows(job: Job) -> tuple[list[tuple], list[tuple]]:
    """(entity, metric, baseline mean, baseline sd, window low, window high) of every series, and of every pod
    born without baseline samples of a metric, against its service's other pods' baseline (no thresholds
    applied)."""
    metrics, newborn = [], []
    if job.rows.get("metrics") and job.rows.get("entities"):
        # pods with no baseline samples of a metric (born after it, e.g. by a rollout): their window
        # against the baseline of the other pods of their service (the peers they join or replace)
        base, win = job.in_baseline("metrics"), job.in_window()
        newborn = job.query(f"""
                WITH pods AS (SELECT id, service FROM entities WHERE kind = 'pod' AND service IS NOT NULL),
                     own AS (SELECT m.entity, p.service, m.metric, count(value) FILTER (WHERE {base}) AS b_n,
                                    min(value, 2) FILTER (WHERE {win}) AS lo, max(value, 2) FILTER (WHERE {win}) AS hi
                             FROM metrics m JOIN pods p ON m.entity = p.id GROUP BY ALL),
                     peers AS (SELECT p.service, m.metric, avg(value) AS b_mean, stddev_samp(value) AS b_sd
                               FROM metrics m JOIN pods p ON m.entity = p.id WHERE {base} GROUP BY ALL)
                SELECT own.entity, own.metric, peers.b_mean, peers.b_sd, own.lo, own.hi
                FROM own JOIN peers USING (service, metric) WHERE own.b_n = 0 AND own.hi IS NOT NULL""")
    if job.rows.get("metrics"):
        metrics = job.query(f"""
                SELECT entity, metric, avg(value) FILTER (WHERE {job.in_baseline('metrics')}),
                       stddev_samp(value) FILTER (WHERE {job.in_baseline('metrics')}),
                       min(value, 2) FILTER (WHERE {job.in_window()}), max(value, 2) FILTER (WHERE {job.in_window()})
                FROM metrics GROUP BY ALL""")
    return metrics, newborn


def metric_signals(job: Job, rows: dict, params: RankingParams):
    """(entity, signal) from its metrics: each series' deviation from its baseline (or, for a pod with no
    history, from its peers'; without a baseline, from its replicas or the others of its kind)."""
    series = metric_series(job, rows)
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
            note += LESS_LOAD
        if client and latency and entity in served and entity not in served_rose:
            # its calls to its dependencies got slower but the requests it serves did not: background or
            # asynchronous work (a sparse series' quantile is one slow call), not what its users wait on
            weight *= params.client_weight
        if waiting:
            weight *= params.waiting
        elif z > 0 and latency and not client and waits(rows, entity, own.get(entity)):
            # its requests got slower but the time it spends itself did not (traces): it waits on callees
            weight *= params.symptom
            note += OWN_TIME_SAME
        yield entity, (weight * 6 * math.log2(1 + abs(z) / 3),
                       f"{metric} {'up' if z > 0 else 'down'} {abs(z):.0f} sd{note}"
                       + (WAITING.format(waiting) if waiting else ""), "metrics")
    if (job.onset is not None and "metrics" in job.onset.tables) or "metrics" in job.without_history():
        # no fault-free baseline came with the job: an entity far from its peers on the same metric stands
        # out although its own history is unknown
        for entity, metric, z, peers in peer_outliers(job):
            if abs(z) >= (params.z_min if peers == REPLICAS else KIND_Z_MIN) and not _better(metric, z):
                yield entity, (6 * math.log2(1 + abs(z) / 3), f"{metric} {z:+.0f} sd off {peers} (no baseline)",
                               "metrics")


def metric_series(job: Job, rows: dict) -> list[tuple]:
    """Per metric series, what does not depend on the parameters: (entity, metric, z, note, latency?,
    client-side?, the callee whose rise explains its own or None, a served-side latency with a baseline?).
    Cached on the job."""
    if "metric_series" in job.cache:
        return job.cache["metric_series"]
    # how far each quality series got worse (a latency's or error count's rise, a success rate's fall)
    rises: dict[tuple[str, str], float] = {}
    for e, m, b, _, lo, hi in rows["metrics"]:
        if b is not None and lo and hi and QUALITY.search(m) and not too_few(job, e, m):
            rise = b - second(lo) if higher_is_better(m) else second(hi) - b
            rises[(e, m)] = rise
            # a service's rise is its most risen pod's (the topology names services, metrics pods)
            name = service_of(job, e)
            rises[(name, m)] = max(rises.get((name, m), -math.inf), rise)
    fanout = _fanout(job)
    newborn = [(e, m, b, sd, lo, hi, " against its peers (no history of its own)") for e, m, b, sd, lo, hi
               in rows["newborn"]]
    out = []
    for entity, metric, b_mean, b_sd, w_low, w_high, note in [(*r, "") for r in rows["metrics"]] + newborn:
        z = series_deviation(job, entity, metric, b_mean, b_sd, second(w_low), second(w_high))
        if traffic_began(metric, b_mean, b_sd):
            z = 0.0
        latency = LATENCY.search(metric) is not None
        # a client-side measurement (a client latency metric, or any metric of an external endpoint, which
        # only its callers observe, or of the users' entry point, which measures the whole system from
        # outside) says as much about the callee side as about the entity
        ent = job.entities.get(entity)
        client = "client" in metric.lower() or (ent is not None and ent.kind in ("external", "entry"))
        # a latency that rose no more than a callee's same latency (times the calls to it per request: a
        # caller that calls it in a loop waits that many times) is time spent waiting on that callee; a
        # success rate that fell (an error count that rose) no more than a callee's same metric is the
        # callee's failures reaching the caller (a caller fails when its callee does)
        rise, name = rises.get((entity, metric), 0.0), service_of(job, entity)
        waiting = None
        if z != 0 and not _better(metric, z) and rise > 0 and note == "":
            waiting = next((c for c in sorted(callees(job).get(name, set()) | callees(job).get(entity, set()))
                            if rises.get((c, metric), 0.0) * (fanout.get((name, c), 1.0) if latency else 1.0)
                            >= WAIT_SHARE * rise), None)
        served = latency and "client" not in metric.lower() and b_mean is not None and not note
        out.append((entity, metric, z, note, latency, client, waiting, served))
    job.cache["metric_series"] = out
    return out


def traffic_began(metric: str, b_mean: float | None, b_sd: float | None) -> bool:
    """A count of events (requests, calls, operations; not of errors or failures) that was zero in every
    baseline sample: the entity got no traffic to judge it by until its callers began to call it, like a
    metric seen only in the window (which deviation scores 0). Its rise from none is its callers' new
    behaviour, not its own."""
    return b_mean == 0 and not b_sd and COUNT.search(metric) is not None and QUALITY.search(metric) is None


def _shared_falls(job: Job, series: list[tuple], z_min: float) -> set[tuple[str, str]]:
    """(entity, resource metric) of a fall that at least half of the entities of its kind carrying the metric,
    and at least SHARED_MIN of them, share: less load arrived, which none of them caused. (A shared rise is
    kept: a fault's extra work, retries and neighbours of a hog, spreads too.) Cached by z_min."""
    if ("shared_falls", z_min) in job.cache:
        return job.cache["shared_falls", z_min]
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
    job.cache["shared_falls", z_min] = {(entity, metric) for (kind, metric), who in fell.items()
                                        if len(who) >= SHARED_MIN and 2 * len(who) >= len(carriers[kind, metric])
                                        for entity in who}
    return job.cache["shared_falls", z_min]


def service_of(job: Job, name: str) -> str:
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


def callees(job: Job) -> dict[str, set[str]]:
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


def higher_is_better(metric: str) -> bool:
    """A quality metric where more is better (a success rate, availability), not worse (errors, latency)."""
    return RATE.search(metric) is not None


def _better(metric: str, z: float) -> bool:
    """A quality metric that moved the good way (a success rate or availability up; errors, failures,
    latency down): an improvement is no evidence of a fault."""
    return QUALITY.search(metric) is not None and (z > 0) == higher_is_better(metric)
