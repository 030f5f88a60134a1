"""overview(kind?): every entity ranked by how far its telemetry moved, rises and drops alike.

Signals, each turned into a comparable score: metric deviation (floored sigmas in the metric's unit,
log-compressed; a pod with no history against its peers), incoming request rate (log ratio, so a service
that stops receiving calls ranks high), callee latency p95, cross-span gap, the rate of warning/error-like
log lines, and a change (deployment, config push, scaling) followed by a degradation of the changed
entity. Call and log rates are judged against the baseline scaled by the change in user traffic. A service
inherits its pods' metric and log signals. No system, dataset or service is named here (a test checks).
"""
from __future__ import annotations

import datetime as dt
import math
import re
from collections import defaultdict
from dataclasses import dataclass

from rcagent.job import Job
from rcagent.tools import Param, register
from rcagent.tools.calls import ERR, edges
from rcagent.tools.common import ERROR_LEVELS, ERROR_WORDS, deviation, one_of, second, table

LIMIT = 15


CHANGE = r"(?i)(deploy|rollout|roll-out|release|config|scal|upgrade|rollback)"   # what a change log calls a change
CHANGE_HORIZON_S = 600   # a change counts up to this long before the window (or the window's length, if longer)
CHANGE_SCORE = 60.0      # a changed entity that degraded after its change outranks symptoms (as an outage does)


def _log_ratio(w: float, b: float) -> float:
    return 10 * abs(math.log2((max(w, 0.0) + 1) / (max(b, 0.0) + 1)))


def traffic_factor(job: Job) -> float:
    """Entry requests per minute in the window over the baseline's (1.0 without traces or a trace baseline).
    Cached on the job."""
    if "traffic_factor" not in job.cache:
        factor = 1.0
        b_min = job.baseline_seconds("traces") / 60
        if job.rows.get("traces") and b_min:
            edges(job)
            b, w = job.query(f"""SELECT count(*) FILTER (WHERE {job.in_baseline('traces', 'start')}),
                                        count(*) FILTER (WHERE {job.in_window('start')})
                                 FROM edges WHERE caller = '(entry)'""")[0]
            if b and w:
                factor = (w / (job.window.seconds / 60)) / (b / b_min)
        job.cache["traffic_factor"] = factor
    return job.cache["traffic_factor"]


@dataclass(frozen=True)
class RankingParams:
    """The overview's thresholds and weights, one place. The defaults were fixed by hand before any
    leave-one-system-out evaluation; `rcagent bench ranking` chooses among a small grid of them on the other
    systems and scores the held-out one."""
    z_min: float = 3.0          # a metric counts from this many (floored) sigmas off its baseline
    call_min: float = 5.0       # a call or log signal counts from this score (10 x |log2 ratio|, ...)
    client_weight: float = 0.5  # a client-side latency measures the entity's dependencies more than itself
    secondary: float = 0.25     # weight of an entity's second and further independent sources of evidence


DEFAULT = RankingParams()


def _rows(job: Job) -> dict[str, list[tuple]]:
    """The aggregated telemetry the overview scores (no thresholds applied), computed once per job."""
    if "overview_rows" in job.cache:
        return job.cache["overview_rows"]
    rows: dict = {"metrics": [], "calls": [], "logs": [], "newborn": []}
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
    if job.rows.get("traces") and job.baseline_seconds("traces"):
        edges(job)
        win, base = job.in_window("start"), job.in_baseline("traces", "start")
        for level in ("callee", "callee_pod"):   # a column of the edges table
            rows["calls"] += job.query(f"""
                    SELECT {level}, count(*) FILTER (WHERE {base}), count(*) FILTER (WHERE {win}),
                           count(*) FILTER (WHERE {win} AND {ERR}),
                           quantile_cont(duration_ms, 0.95) FILTER (WHERE {base}),
                           quantile_cont(duration_ms, 0.95) FILTER (WHERE {win}),
                           median(gap_ms) FILTER (WHERE {base}), median(gap_ms) FILTER (WHERE {win})
                    FROM edges WHERE {level} IS NOT NULL GROUP BY 1""")
    # changes (deployments, config pushes, scaling) in the window or shortly before it
    rows["changes"] = latest_changes(
        job, since=job.window.start - dt.timedelta(seconds=max(job.window.seconds, CHANGE_HORIZON_S)))
    if job.rows.get("logs"):
        rows["logs"] = job.query(f"""
                SELECT entity, count(*) FILTER (WHERE {job.in_baseline('logs')}), count(*) FILTER (WHERE {job.in_window()})
                FROM logs WHERE {one_of('upper(level)', 'levels')} OR regexp_matches(message, $words)
                GROUP BY 1""", {"levels": list(ERROR_LEVELS), "words": ERROR_WORDS})
    job.cache["overview_rows"] = rows
    return rows


def scores(job: Job, params: RankingParams = DEFAULT) -> dict[str, list[tuple[float, str, str]]]:
    """entity -> [(score, reason, source)], best first; source is metrics, calls, logs or changes. Cached on
    the job."""
    key = ("overview", params)
    if key in job.cache:
        return job.cache[key]
    rows = _rows(job)
    found: dict[str, list[tuple[float, str, str]]] = defaultdict(list)
    newborn = [(e, m, b, sd, lo, hi, " against its peers (no history of its own)") for e, m, b, sd, lo, hi
               in rows["newborn"]]
    for entity, metric, b_mean, b_sd, w_low, w_high, note in [(*r, "") for r in rows["metrics"]] + newborn:
        z = deviation(b_mean, b_sd, second(w_low), second(w_high), metric)
        if abs(z) >= params.z_min:
            weight = params.client_weight if "client" in metric.lower() else 1.0
            found[entity].append((weight * 6 * math.log2(1 + abs(z) / 3),
                                  f"{metric} {'up' if z > 0 else 'down'} {abs(z):.0f} sd{note}", "metrics"))
    b_min, w_min = job.baseline_seconds("traces") / 60, job.window.seconds / 60
    load = traffic_factor(job)  # call and log rates are judged against the baseline scaled by it
    for name, b, w, err, b95, w95, bgap, wgap in rows["calls"]:
        # Rates are compared with the baseline scaled by the change in user traffic, so that a busier
        # window does not make every service look anomalous.
        b_rate, w_rate = load * b / b_min, w / w_min
        if b_rate >= 1 and w == 0:  # an outage: it stopped receiving calls altogether
            found[name].append((60 + _log_ratio(b_rate, 0), f"incoming calls STOPPED ({b_rate:.0f}/min before)", "calls"))
        elif b_rate >= 1 or w_rate >= 1:
            s = _log_ratio(w_rate, b_rate)
            if s >= params.call_min:
                found[name].append((s, f"incoming calls {b_rate:.0f}->{w_rate:.0f}/min", "calls"))
        if b95 is not None and w95 is not None:
            s = _log_ratio(w95, b95)
            if s >= params.call_min:
                found[name].append((s, f"latency p95 {b95:.0f}->{w95:.0f} ms", "calls"))
        if bgap is not None and wgap is not None:
            s = _log_ratio(wgap, bgap)
            if s >= params.call_min:
                found[name].append((s, f"cross-span gap {bgap:.1f}->{wgap:.1f} ms", "calls"))
        if err:
            found[name].append((10 + 10 * math.log2(1 + err), f"{err} error spans", "calls"))
    lb_min = job.baseline_seconds("logs") / 60
    for entity, b, w in rows["logs"]:
        b_rate = load * b / lb_min if lb_min else 0.0
        w_rate = w / w_min
        if w_rate > b_rate:
            s = 10 * (w_rate - b_rate) / math.sqrt(b_rate + 1)
            if s >= params.call_min:
                found[entity].append((min(s, 100.0), f"error-like logs {b_rate:.1f}->{w_rate:.1f}/min", "logs"))
    for entity in list(found):
        # Services inherit their pods' metric and log signals (their call signals are computed per service
        # already, so inheriting those would count them twice); nodes are kept separate.
        found[entity].sort(reverse=True)
        ent = job.entities.get(entity)
        if ent and ent.kind == "pod" and ent.service and ent.service != entity:
            found[ent.service].extend((s, f"{r} ({entity})", src) for s, r, src in found[entity]
                                      if src != "calls")
    for name, (at, reason) in rows["changes"].items():
        # A change followed by a worse service from the changed entity (its own or its pods' errors,
        # latency, success rate; not resource use, which any rollout moves) makes it the prime suspect:
        # most production incidents follow a change. A change with no degradation after it adds nothing
        # (harmless changes are the rule).
        degraded = max((s for s, why, src in found.get(name, []) if _worse_service(why, src)), default=0.0)
        if degraded:
            found[name].append((CHANGE_SCORE + degraded, f"{reason or 'change'} at {at:%H:%M:%S} UTC, "
                                                          "then its service degraded", "changes"))
    for entity in found:
        found[entity].sort(reverse=True)
    job.cache[key] = dict(found)
    return job.cache[key]


def latest_changes(job: Job, since: dt.datetime | None = None) -> dict[str, tuple]:
    """entity -> (time, reason) of its latest change event from `since` (default: any time) to the window's
    end; a pod's change counts for its service."""
    if not job.rows.get("events"):
        return {}
    changes = job.query("""
            SELECT entity, max(timestamp), arg_max(coalesce(reason, ''), timestamp) FROM events
            WHERE regexp_matches(coalesce(reason, '') || ' ' || coalesce(message, ''), $change)
              AND timestamp >= $since AND timestamp < $end GROUP BY entity""",
                        {"change": CHANGE, "since": since or dt.datetime.min, "end": job.window.end})
    latest: dict[str, tuple] = {}
    for entity, at, reason in changes:
        ent = job.entities.get(entity)
        name = ent.service if ent and ent.kind == "pod" and ent.service in job.entities else entity
        if name in job.entities and (name not in latest or at > latest[name][0]):
            latest[name] = (at, reason)
    return latest


QUALITY = re.compile(r"(?i)(success|error|fail|latency|timeout|availab|status)")


def _worse_service(reason: str, source: str) -> bool:
    """A signal that says the entity serves worse: call and log signals, and quality metrics (success
    rates down; error rates, latency up), not resource metrics."""
    if source in ("calls", "logs"):
        return True
    if source != "metrics" or not QUALITY.search(reason):
        return False
    falling_is_bad = re.search(r"(?i)(success|availab)", reason) is not None
    return (" down " in reason) == falling_is_bad


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
    if not ranked:
        return "No entity moved noticeably from its baseline."
    rows = [[i + 1, e, job.entities[e].kind, f"{s:.0f}", "; ".join(r)] for i, (e, s, r) in enumerate(ranked[:LIMIT])]
    text = "Entities ranked by anomaly score (higher = moved more from baseline):\n"
    load = traffic_factor(job)
    if abs(load - 1) > 0.2:
        text = (f"User traffic in the window is {load:.1f}x the baseline; call and error rates are compared "
                "with the baseline scaled by it.\n" + text)
    text += table(
        ["#", "entity", "kind", "score", "top signals"], rows)
    quiet = len(job.entities) - len(ranked)
    if quiet > 0 and not kind:
        text += f"\n{quiet} other entities show no notable change."
    return text
