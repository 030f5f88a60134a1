"""The span agents' data tools (RCLAgent §IV-A2, §IV-A3), bounded to one span.

span_metrics: the metrics of the span's pod, its service and the pod's node; each metric's mean and sd
over the job's long baseline; a metric is anomalous when a value within [t0 - delta, t0 + delta] (t0 =
the span's start) lies more than n sd from that mean (n = 3, delta = 60 s by default).
span_logs: the lines of the span's pod and service within [t0 - delta, t0 + delta] that pass a relevance
filter: error-like level or words, or the span's own trace id; folded into templates with counts.
Each answer is cut to `limit` characters, so an agent's context stays bounded.
"""
from __future__ import annotations

import datetime as dt

from rcagent.job import Job
from rcagent.errorlike import is_error_line, one_of
from rcagent.tools.common import fmt, template

ROWS = 6


def related(job: Job, span) -> list[str]:
    """The span's pod, its service and the pod's node, as far as the inventory knows them."""
    names = []
    for name in (span.entity, span.service):
        if name and name not in names:
            names.append(name)
    ent = job.entities.get(span.entity)
    if ent and ent.node and ent.node not in names:
        names.append(ent.node)
    return names


def _interval(span, delta_s: float) -> tuple[dt.datetime, dt.datetime]:
    t0 = span.start if isinstance(span.start, dt.datetime) else dt.datetime.fromisoformat(str(span.start))
    return t0 - dt.timedelta(seconds=delta_s), t0 + dt.timedelta(seconds=delta_s)


def span_metrics(job: Job, span, delta_s: float = 60.0, n_sigma: float = 3.0, limit: int = 700) -> str:
    if not job.rows.get("metrics"):
        return "no metrics in this job"
    lo, hi = _interval(span, delta_s)
    rows = job.query(f"""
        WITH b AS (SELECT entity, metric, avg(value) mu, stddev_samp(value) sd FROM metrics
                   WHERE {one_of('entity', 'names')} AND {job.in_baseline('metrics')} GROUP BY 1, 2),
             w AS (SELECT entity, metric, min(value) lo, max(value) hi FROM metrics
                   WHERE {one_of('entity', 'names')} AND timestamp >= $lo AND timestamp <= $hi GROUP BY 1, 2)
        SELECT w.entity, w.metric, b.mu, b.sd, w.lo, w.hi FROM w JOIN b USING (entity, metric)""",
        {"names": related(job, span), "lo": lo, "hi": hi})
    found = []
    for entity, metric, mu, sd, w_lo, w_hi in rows:
        if mu is None or w_lo is None:
            continue
        dev = max(abs(w_hi - mu), abs(w_lo - mu))
        floor = 0.01 * abs(mu) if mu else 1e-9      # a flat baseline: a change over 1% counts
        if (sd and dev > n_sigma * sd) or (not sd and dev > floor):
            found.append((dev / sd if sd else float("inf"), entity, metric, mu, sd, w_lo, w_hi))
    if not found:
        return f"no metric of {', '.join(related(job, span))} beyond {n_sigma:g} sd within +-{delta_s:g} s"
    found.sort(key=lambda r: -r[0])
    lines = [f"{len(found)} metric(s) beyond {n_sigma:g} sd within +-{delta_s:g} s of the span (strongest first):"]
    for z, entity, metric, mu, sd, w_lo, w_hi in found[:ROWS]:
        lines.append(f"- {entity} {metric}: baseline {fmt(mu)}+-{fmt(sd or 0)}, now {fmt(w_lo)}..{fmt(w_hi)}"
                     + (f" ({z:.0f} sd)" if z != float("inf") else " (flat baseline)"))
    return _cut("\n".join(lines), limit)


def span_logs(job: Job, span, trace_id: str, delta_s: float = 60.0, limit: int = 700) -> str:
    if not job.rows.get("logs"):
        return "no logs in this job"
    lo, hi = _interval(span, delta_s)
    names = [span.entity, span.service] + [e.id for e in job.entities.values()
                                           if span.service and e.service == span.service]
    rows = job.query(f"""
        SELECT level, message, trace_id FROM logs
        WHERE {one_of('entity', 'names')} AND timestamp >= $lo AND timestamp <= $hi""",
        {"names": [n for n in names if n], "lo": lo, "hi": hi})
    counts: dict[str, int] = {}
    for level, message, tid in rows:
        relevant = is_error_line(level, message) or (tid and tid == trace_id)
        if relevant:
            key = f"{(level or '').upper()} {template(message or '')}".strip()
            counts[key] = counts.get(key, 0) + 1
    if not counts:
        return f"no error-like or same-trace log line of {span.service or span.entity} within +-{delta_s:g} s"
    lines = [f"{sum(counts.values())} relevant log line(s) within +-{delta_s:g} s, as templates (most frequent first):"]
    lines += [f"- {n}x {t[:160]}" for t, n in sorted(counts.items(), key=lambda kv: -kv[1])[:ROWS]]
    return _cut("\n".join(lines), limit)


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 15].rsplit("\n", 1)[0] + "\n[... cut]"
