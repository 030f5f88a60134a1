"""metrics(entity, metric?): the entity's metrics, flagged window against baseline, biggest change first."""
from __future__ import annotations

from rcagent.job import Job
from rcagent.tools import Param, entity_param, register
from rcagent.tables import render_table
from rcagent.tools.common import arrow, fmt, metric_stats, short

LIMIT = 25


@register("metrics", "Metrics of an entity (a service includes its pods): baseline mean+-sd against the "
          "flagged window, sorted by how far they moved (rises and drops)",
          entity_param(), Param("metric", "part of a metric name to filter on, e.g. cpu or latency", required=False))
def metrics(job: Job, entity: str, metric: str | None = None) -> str:
    ent = job.entities[entity]
    members = job.members(ent)
    if ent.kind == "pod" and ent.node:
        members.append(ent.node)
    stats = metric_stats(job, members, metric)
    if not stats:
        if not job.rows.get("metrics"):
            return "This job has no metrics table."
        what = f" matching '{metric}'" if metric else ""
        return f"No metrics{what} for {entity} ({ent.kind})."
    head = f"Metrics of {entity} ({ent.kind}{'; ' + str(len(members) - 1) + ' members' if len(members) > 1 else ''}), " \
           f"flagged window vs baseline, biggest change first (score = sigmas from baseline):"
    rows = [[short(s["metric"], 30), short(s["entity"], 40), f"{fmt(s['b_mean'])}+-{fmt(s['b_sd'])}",
             f"{fmt(s['w_mean'])} [{fmt(s['w_min'])}..{fmt(s['w_max'])}]", f"{s['score']:+.1f} {arrow(s['score'])}"]
            for s in stats[:LIMIT]]
    text = head + "\n" + render_table(["metric", "entity", "baseline", "window mean [min..max]", "score"], rows)
    if len(stats) > LIMIT:
        text += f"\n({len(stats) - LIMIT} more metrics moved less)"
    return text
