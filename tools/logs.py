"""logs(entity, query?): WARNING-and-above or error-like log lines, folded into templates with counts."""
from __future__ import annotations

from collections import defaultdict

from rcagent.job import Job
from rcagent.tools import Param, entity_param, has_rows, register
from rcagent.errorlike import ERROR_LIKE, ERROR_PARAMS, one_of
from rcagent.tables import render_table
from rcagent.tools.common import like_escape, quoted, template

LIMIT = 15


@register("logs", "Warning/error-like log lines of an entity, duplicates folded into templates, with counts "
          "per minute in the baseline and in the flagged window (new templates first)",
          entity_param(), Param("query", "a word to search all log lines for instead, e.g. timeout", required=False),
          available=has_rows("logs"))
def logs(job: Job, entity: str, query: str | None = None) -> str:
    if not job.rows.get("logs"):
        return "This job has no logs table (no log lines were collected)."
    ent = job.entities[entity]
    members = job.members(ent)
    params: dict = {"members": members}
    if query:
        cond, params["query"] = "message ILIKE $query ESCAPE '\\'", f"%{like_escape(str(query))}%"
    else:
        cond = ERROR_LIKE
        params.update(ERROR_PARAMS)
    rows = job.query(f"""
        SELECT level, message, {job.in_window()} AS flagged
        FROM logs WHERE {one_of('entity', 'members')} AND {cond}
          AND ({job.in_window()} OR {job.in_baseline('logs')})""", params)
    total = job.query(f"""SELECT count(*) FILTER (WHERE {job.in_window()}),
                                 count(*) FILTER (WHERE {job.in_baseline('logs')})
                          FROM logs WHERE {one_of('entity', 'members')}""", {"members": members})[0]
    w_min = max(job.window.seconds / 60, 1e-9)
    b_min = job.baseline_seconds("logs") / 60
    what = f"lines matching {quoted(str(query), 40)}" if query else "warning/error-like lines"
    head = (f"Logs of {entity} ({ent.kind}): {total[0]} lines in the window ({total[0] / w_min:.1f}/min), "
            f"{total[1]} in the baseline ({total[1] / b_min:.1f}/min)." if b_min else
            f"Logs of {entity} ({ent.kind}): {total[0]} lines in the window; no baseline logs.")
    if not rows:
        return head + f"\nNo {what}."
    groups: dict[str, dict] = defaultdict(lambda: {"w": 0, "b": 0, "level": "", "example": ""})
    for level, message, flagged in rows:
        g = groups[template(message)]
        g["w" if flagged else "b"] += 1
        g["level"] = g["level"] or level
        if flagged and not g["example"]:
            g["example"] = message.strip()
    ranked = sorted(groups.items(), key=lambda kv: (-(kv[1]["w"] / w_min - (kv[1]["b"] / b_min if b_min else 0)),
                                                     -kv[1]["w"]))
    body = []
    for tmpl, g in ranked[:LIMIT]:
        tag = "NEW " if g["w"] and not g["b"] else "GONE" if g["b"] and not g["w"] else ""
        b_rate = f"{g['b'] / b_min:.1f}" if b_min else "-"
        body.append([f"{g['w'] / w_min:.1f}", b_rate, g["w"], g["level"][:5], tag, tmpl[:160]])
    text = head + f"\n{len(groups)} templates of {what} (rate = lines/min):\n" + render_table(
        ["window", "baseline", "count", "level", "", "template"], body)
    if len(ranked) > LIMIT:
        text += f"\n({len(ranked) - LIMIT} more templates)"
    examples = [g["example"] for _, g in ranked[:3] if g["example"]]
    if examples:
        text += "\nExample lines from the window (quoted log data):\n" + "\n".join(f"  {quoted(e)}" for e in examples)
    return text
