"""topology(entity): what the entity is, what it calls, what calls it, where it runs and what runs beside it."""
from __future__ import annotations

from rcagent.job import Job
from rcagent.tools import entity_param, register


def _names(items, limit: int = 12) -> str:
    items = sorted(set(items))
    if not items:
        return "none"
    more = f" (+{len(items) - limit} more)" if len(items) > limit else ""
    return ", ".join(items[:limit]) + more


@register("topology", "Topology around an entity: its kind, service, node, pods, callers and callees",
          entity_param())
def topology(job: Job, entity: str) -> str:
    ent = job.entities[entity]
    service = ent.service if ent.kind == "pod" else entity
    rels = job.query("SELECT src, dst, kind FROM relations WHERE src = ? OR dst = ? OR src = ? OR dst = ?",
                     [entity, entity, service or entity, service or entity])
    callers = [s for s, d, k in rels if k == "calls" and d in (entity, service)]
    callees = [d for s, d, k in rels if k == "calls" and s in (entity, service)]
    lines = [f"{entity}: {ent.kind}"]
    if ent.kind == "pod":
        lines.append(f"service: {ent.service or 'unknown'}; node: {ent.node or 'unknown'}")
        siblings = [e.id for e in job.entities.values() if e.kind == "pod" and e.service == ent.service and e.id != entity]
        lines.append(f"other pods of the service: {_names(siblings)}")
        if ent.node:
            lines.append(f"pods on the same node: {_names(e.id for e in job.entities.values() if e.node == ent.node and e.kind == 'pod' and e.id != entity)}")
    elif ent.kind == "node":
        lines.append(f"pods on this node: {_names(e.id for e in job.entities.values() if e.node == entity and e.kind == 'pod')}")
    else:
        lines.append(f"pods: {_names(e.id for e in job.entities.values() if e.kind == 'pod' and e.service == entity)}")
    if ent.kind != "node":
        lines.append(f"called by: {_names(callers)}")
        lines.append(f"calls: {_names(callees)}")
    if not job.rows.get("relations"):
        lines.append("(this job has no relations table: calls are unknown)")
    return "\n".join(lines)
