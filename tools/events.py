"""events(entity): platform events (restarts, evictions, scaling) of an entity, window against baseline."""
from __future__ import annotations

from rcagent.job import Job
from rcagent.tools import entity_param, has_rows, register
from rcagent.tables import render_table
from rcagent.tools.common import one_of, quoted


@register("events", "Platform events of an entity (restarts, OOM kills, evictions, deployments), "
          "counted in the baseline and the flagged window", entity_param(), available=has_rows("events"))
def events(job: Job, entity: str) -> str:
    if not job.rows.get("events"):
        return "This job has no events table (no platform events were collected)."
    ent = job.entities[entity]
    members = job.members(ent)
    rows = job.query(f"""
        SELECT coalesce(reason, '?'), count(*) FILTER (WHERE {job.in_baseline('events')}),
               count(*) FILTER (WHERE {job.in_window()}),
               any_value(message) FILTER (WHERE {job.in_window()})
        FROM events WHERE {one_of('entity', 'members')} GROUP BY 1 ORDER BY 3 DESC, 2 DESC""", {"members": members})
    if not rows:
        return f"No events for {entity} ({ent.kind})."
    return f"Events of {entity} ({ent.kind}):\n" + render_table(
        ["reason", "baseline", "window", "example"], [[quoted(r, 40), b, w, quoted(m or "", 160)] for r, b, w, m in rows])
