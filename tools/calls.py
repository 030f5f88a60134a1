"""calls(entity, direction?): the entity's calls from traces, flagged window against baseline.

Requests, errors and latency quantiles per minute; callers and callees with rates; calls that disappeared;
and the cross-span gap: the caller's span duration minus the callee's own span duration, i.e. the time a
call spends between the two services (network, queues) -- the signal that exposes network faults.
"""
from __future__ import annotations

from rcagent.errorlike import ERR, one_of
from rcagent.job import Job
from rcagent.tools import Param, entity_param, has_rows, register
from rcagent.tables import render_table
from rcagent.tools.common import fmt


def edges(job: Job) -> str:
    """A temp table of cross-service calls: one row per child span whose parent is in another service (the
    parent's operation as caller_operation)."""
    if "edges" not in job.cache:
        job.con.execute("""
            CREATE OR REPLACE TEMP TABLE spans AS
            SELECT s.*, coalesce(s.service, e.service, s.entity) AS svc,
                   count(*) OVER (PARTITION BY s.trace_id, s.parent_id) AS siblings
            FROM traces s LEFT JOIN entities e ON s.entity = e.id""")
        job.con.execute("""
            CREATE OR REPLACE TEMP TABLE edges AS
            SELECT c.start, c.trace_id, p.svc AS caller, p.entity AS caller_pod, c.svc AS callee,
                   c.entity AS callee_pod, c.operation, c.duration_ms, c.status,
                   CASE WHEN c.siblings = 1 THEN p.duration_ms - c.duration_ms END AS gap_ms,
                   p.operation AS caller_operation
            FROM spans c JOIN spans p ON c.parent_id = p.span_id AND c.trace_id = p.trace_id
            WHERE p.svc <> c.svc
            UNION ALL
            SELECT c.start, c.trace_id, '(entry)', NULL, c.svc, c.entity, c.operation, c.duration_ms, c.status, NULL,
                   NULL
            FROM spans c WHERE c.parent_id IS NULL""")
        job.cache["edges"] = True
    return "edges"




@register("calls", "Calls of an entity from traces: requests, errors and latency per minute, callers and "
          "callees with rates and the cross-span gap (caller span minus callee span), calls that disappeared",
          entity_param(), Param("direction", "in (who calls it), out (what it calls) or both", required=False,
                                choices=("in", "out", "both")), available=has_rows("traces"))
def calls(job: Job, entity: str, direction: str | None = None) -> str:
    if not job.rows.get("traces"):
        return "This job has no traces table (no spans were collected): use metrics and logs."
    direction = direction or "both"
    if direction not in ("in", "out", "both"):
        raise ValueError("direction must be in, out or both")
    ent = job.entities[entity]
    edges(job)
    # the entity's names are bound as the parameter $mine, never written into the SQL
    if ent.kind == "pod":
        mine = [entity]
        mine_in, mine_out = one_of("callee_pod", "mine"), one_of("caller_pod", "mine")
    elif ent.kind == "node":
        mine = [m for m in job.members(ent) if m != entity]
        mine_in, mine_out = one_of("callee_pod", "mine"), one_of("caller_pod", "mine")
    else:
        mine = [entity]
        mine_in, mine_out = one_of("callee", "mine"), one_of("caller", "mine")
    params = {"mine": mine}
    w_min = job.window.seconds / 60
    b_min = job.baseline_seconds("traces") / 60
    win, base = job.in_window("start"), job.in_baseline("traces", "start")
    out = [f"Calls of {entity} ({ent.kind}); rates are calls/min; latency in ms; "
           + (f"baseline {b_min:.0f} min of traces." if b_min else "no baseline traces in this job.")]

    per_min = job.query(f"""
        SELECT strftime(date_trunc('minute', start), '%H:%M'), count(*), count(*) FILTER (WHERE {ERR}),
               quantile_cont(duration_ms, 0.5), quantile_cont(duration_ms, 0.95)
        FROM edges WHERE {mine_in} AND {win} GROUP BY 1 ORDER BY 1""", params)
    base_row = job.query(f"""
        SELECT count(*), count(*) FILTER (WHERE {ERR}), quantile_cont(duration_ms, 0.5),
               quantile_cont(duration_ms, 0.95) FROM edges WHERE {mine_in} AND {base}""", params)[0]
    if direction in ("in", "both"):
        rows = [["baseline", fmt(base_row[0] / b_min) if b_min else "-", base_row[1], fmt(base_row[2]), fmt(base_row[3])]]
        rows += [[m, n, e, fmt(p50), fmt(p95)] for m, n, e, p50, p95 in per_min]
        out.append("Incoming requests per minute:\n" + render_table(["minute", "requests", "errors", "p50", "p95"], rows))
        out.append(_peers(job, "caller", mine_in, params, win, base, w_min, b_min, "Callers"))
    if direction in ("out", "both"):
        out.append(_peers(job, "callee", mine_out, params, win, base, w_min, b_min, "Callees"))
    return "\n".join(o for o in out if o)


def _peers(job: Job, peer: str, mine: str, params: dict, win: str, base: str, w_min: float, b_min: float,
           title: str) -> str:
    assert peer in ("caller", "callee")   # a column name of the edges table, spliced into the SQL
    rows = job.query(f"""
        SELECT {peer}, count(*) FILTER (WHERE {base}), count(*) FILTER (WHERE {win}),
               count(*) FILTER (WHERE {win} AND {ERR}),
               quantile_cont(duration_ms, 0.95) FILTER (WHERE {base}),
               quantile_cont(duration_ms, 0.95) FILTER (WHERE {win}),
               median(gap_ms) FILTER (WHERE {base}), median(gap_ms) FILTER (WHERE {win})
        FROM edges WHERE {mine} AND ({win} OR {base}) GROUP BY 1""", params)
    if not rows:
        return f"{title}: none seen."
    body, gone = [], []
    for name, b, w, err, b95, w95, bgap, wgap in rows:
        b_rate = b / b_min if b_min else None
        w_rate = w / w_min
        if b and not w:
            gone.append(name)
        body.append((abs((w_rate + 1) / ((b_rate or 0) + 1)), [
            name, fmt(b_rate), fmt(w_rate), err, fmt(b95), fmt(w95), fmt(bgap), fmt(wgap)]))
    body.sort(key=lambda r: -max(r[0], 1 / r[0]))
    text = f"{title} (p95 of the callee span; gap = caller span - callee span, median):\n" + render_table(
        [peer, "rate base", "rate win", "errors", "p95 base", "p95 win", "gap base", "gap win"],
        [r for _, r in body[:15]])
    if gone:
        text += f"\nDISAPPEARED in the window (seen in the baseline, absent now): {', '.join(sorted(gone))}"
    return text
