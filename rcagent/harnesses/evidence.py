"""The one-shot evidence package: the whole case as text, sized to a token budget (RCAtlas §5).

Sections: the case (alert, window, baseline), the inventory, changes (events), the metric series that moved
(raw samples around the window), per-minute call statistics per caller->callee edge, and log templates with
their rates before and during the window. Each section's lines come most telling first; when the package
exceeds the budget each section is cut from its end to its share, and the package says what was cut.
Telemetry text is quoted (tools.common.quoted): a log line cannot pose as a header or an instruction.
"""
from __future__ import annotations

import datetime as dt
import math
from dataclasses import dataclass, field

from rcagent.errorlike import ERR, ERROR_LIKE, ERROR_PARAMS
from rcagent.job import Job
from rcagent.tools.calls import edges
from rcagent.tools.common import fmt, metric_stats, plain, quoted, template

# Measured on a TrainTicket package: 1.9 characters per token (SmolLM2), 2.1 (Qwen2.5): numbers are a
# token per digit. English prose is nearer 4.
CHARS_PER_TOKEN = 1.9
MOVED = 3.0             # a series whose window extreme is this many (floored) sd from its baseline moved
SAMPLES = 12            # points per metric series
MINUTES = 15            # per-minute columns per call edge
EVENTS_BEFORE = dt.timedelta(hours=2)
CUT_NOTE = 90           # characters kept free per section for its "(N more lines ... cut)" note
# Shares of the budget left after the case header; a section that needs less gives the rest to the others.
SHARES = {"inventory": 0.10, "changes": 0.15, "metrics": 0.30, "calls": 0.25, "logs": 0.20}


@dataclass
class Package:
    text: str
    tokens: int                                     # estimated (CHARS_PER_TOKEN)
    budget: int
    cut: dict[str, int] = field(default_factory=dict)   # section -> lines left out to fit the budget


def tokens(text: str) -> int:
    return math.ceil(len(text) / CHARS_PER_TOKEN)


def build(job: Job, budget_tokens: int) -> Package:
    header = f"Alert: {quoted(job.alert, 400)}\n{job.summary()}"
    sections = {"inventory": inventory(job), "changes": changes(job), "metrics": metrics(job),
                "calls": calls(job), "logs": logs(job)}
    # what is always there: the header, each section's title, and room for a cut note per section
    fixed = len(header) + sum(len(lines[0]) + 2 for lines in sections.values()) + CUT_NOTE * len(sections)
    room = max(0, budget_tokens * CHARS_PER_TOKEN - fixed)
    sizes = {name: sum(len(line) + 1 for line in lines[1:]) for name, lines in sections.items()}
    quota = allot(sizes, room)
    parts, cut = [header], {}
    for name, lines in sections.items():
        title, body = lines[0], lines[1:]
        kept, used = [], 0
        for line in body:
            if used + len(line) + 1 > quota[name]:
                break
            kept.append(line)
            used += len(line) + 1
        if len(kept) < len(body):
            cut[name] = len(body) - len(kept)
            kept.append(f"({cut[name]} more lines of {name} cut to fit the budget of {budget_tokens} tokens)")
        parts.append("\n".join([title] + (kept or ["(none)"])))
    text = "\n\n".join(parts)
    return Package(text, tokens(text), budget_tokens, cut)


def allot(sizes: dict[str, int], room: float) -> dict[str, float]:
    """Characters per section: its share of the room, and what smaller sections leave unused shared among
    the rest by their shares (water-filling)."""
    quota, left, open_ = {}, room, dict(SHARES)
    while open_:
        total = sum(open_.values())
        small = {n for n in open_ if sizes[n] <= left * open_[n] / total}
        if not small:
            quota.update({n: left * s / total for n, s in open_.items()})
            break
        for n in small:
            quota[n] = sizes[n]
            left -= sizes[n]
            del open_[n]
    return quota


def inventory(job: Job) -> list[str]:
    out = ["## Inventory (service: its pods [node])"]
    pods: dict[str, list[str]] = {}
    for e in job.entities.values():
        if e.kind == "pod":
            pods.setdefault(e.service or "(no service)", []).append(plain(e.id) + (f" [{plain(e.node)}]" if e.node else ""))
    for e in sorted(job.entities.values(), key=lambda e: (e.kind != "service", e.kind, e.id)):
        if e.kind == "service":
            out.append(f"{plain(e.id)}: {', '.join(sorted(pods.pop(e.id, []))) or '(no pods)'}")
        elif e.kind != "pod":
            out.append(f"{plain(e.id)} ({plain(e.kind, 20)})")
    out += [f"{plain(svc)}: {', '.join(sorted(names))}" for svc, names in sorted(pods.items())]
    return out


def changes(job: Job) -> list[str]:
    out = [f"## Events from {EVENTS_BEFORE} before the window to its end, newest first (UTC)"]
    if not job.rows.get("events"):
        return out + ["(this job has no events table)"]
    rows = job.query("""SELECT timestamp, entity, coalesce(reason, ''), coalesce(message, '') FROM events
                        WHERE timestamp >= $since AND timestamp < $end ORDER BY timestamp DESC, entity LIMIT 500""",
                     {"since": job.window.start - EVENTS_BEFORE, "end": job.window.end})
    return out + [f"{t:%m-%d %H:%M:%S} {plain(e)} {quoted(r, 40)} {quoted(m, 160)}" for t, e, r, m in rows]


def metrics(job: Job) -> list[str]:
    title = (f"## Metric series that moved (|deviation| >= {MOVED:g} sd), most moved first: baseline mean+-sd, "
             f"window min..max, then {SAMPLES} averaged samples from before the window to its end ('|' = window start)")
    if not job.rows.get("metrics"):
        return [title, "(this job has no metrics table)"]
    names = [n for (n,) in job.query("SELECT DISTINCT entity FROM metrics WHERE entity IS NOT NULL")]
    stats = metric_stats(job, names)
    moved = [s for s in stats if abs(s["score"]) >= MOVED][:60]
    out = [title]
    if not moved:
        moved = stats[:5]
        out.append(f"(no series moved {MOVED:g} sd; the {len(moved)} that moved most)")
    samples = _samples(job, [(s["entity"], s["metric"]) for s in moved])
    for s in moved:
        spread = f"+-{fmt(s['b_sd'])}" if s["b_sd"] is not None else " (one sample)"
        line = (f"{plain(s['entity'])} {quoted(s['metric'], 60)} dev {s['score']:+.1f}: baseline "
                f"{fmt(s['b_mean'])}{spread}, window {fmt(s['w_min'])}..{fmt(s['w_max'])}")
        points = samples.get((s["entity"], s["metric"]))
        out.append(f"{line}; samples {points}" if points else line)
    return out


def _samples(job: Job, series: list[tuple[str, str]]) -> dict[tuple[str, str], str]:
    """Averaged samples per series from before the window (as long as the window, at most 30 min) to its end."""
    if not series:
        return {}
    w = job.window
    before = min(w.end - w.start, dt.timedelta(minutes=30))
    start = w.start - before
    step = (w.end - start).total_seconds() / SAMPLES
    rows = job.query("""
        SELECT entity, metric, floor((epoch(timestamp) - epoch($start)) / $step)::INT AS b, avg(value)
        FROM metrics WHERE list_contains($keys, entity || chr(31) || metric)
          AND timestamp >= $start AND timestamp < $end GROUP BY ALL ORDER BY entity, metric, b""",
                     {"keys": [f"{e}\x1f{m}" for e, m in series], "start": start, "end": w.end, "step": step})
    mark = int(before.total_seconds() / step)
    out: dict[tuple[str, str], list[str]] = {}
    for entity, metric, bucket, value in rows:
        out.setdefault((entity, metric), []).append(("| " if bucket == mark else "") + fmt(value))
    return {k: " ".join(v) for k, v in out.items()}


def calls(job: Job) -> list[str]:
    title = (f"## Calls per caller->callee edge: baseline requests/min, error %, p95 ms; then per window minute "
             f"(up to {MINUTES}) requests, error %, p95 ms; most changed edges first")
    if not job.rows.get("traces"):
        return [title, "(this job has no traces table)"]
    edges(job)
    b_min = job.baseline_seconds("traces") / 60
    base = {(c, d): (n, e, p95) for c, d, n, e, p95 in job.query(f"""
        SELECT caller, callee, count(*), count(*) FILTER (WHERE {ERR}), quantile_cont(duration_ms, 0.95)
        FROM edges WHERE {job.in_baseline('traces', 'start')} GROUP BY ALL""")}
    per_min: dict[tuple[str, str], list[tuple]] = {}
    for c, d, minute, n, e, p95 in job.query(f"""
            SELECT caller, callee, date_trunc('minute', start) AS m, count(*), count(*) FILTER (WHERE {ERR}),
                   quantile_cont(duration_ms, 0.95)
            FROM edges WHERE {job.in_window('start')} GROUP BY ALL ORDER BY m"""):
        per_min.setdefault((c, d), []).append((n, e, p95))
    lines = []
    for key in set(base) | set(per_min):
        bn, be, bp = base.get(key, (0, 0, None))
        mins = per_min.get(key, [])[:MINUTES]
        b_err = 100 * be / bn if bn else 0.0
        w_err = [100 * e / n for n, e, _ in mins]
        w_p95 = [p for _, _, p in mins if p is not None]
        change = max([0.0] + [abs(x - b_err) / 10 for x in w_err]
                     + [abs(math.log((max(p, 0) + 1) / (max(bp, 0) + 1))) for p in w_p95 if bp is not None]
                     + ([3.0] if bn and not mins else []))
        b_rate = f"{fmt(bn / b_min)}/min" if b_min else "-"
        text = (f"{plain(key[0], 40)} -> {plain(key[1], 40)}: baseline {b_rate} {b_err:.0f}% p95 {fmt(bp)} | window "
                + (f"req {' '.join(str(n) for n, _, _ in mins)}; err% {' '.join(f'{x:.0f}' for x in w_err)}; "
                   f"p95 {' '.join(fmt(p) for p in w_p95)}" if mins else "no calls (stopped)"))
        lines.append((-change, str(key), text))
    return [title] + [t for _, _, t in sorted(lines)]


def logs(job: Job) -> list[str]:
    title = ("## Log templates (numbers, ids and times masked): lines/min in the baseline and in the window; "
             "new and grown first, error-like marked !")
    if not job.rows.get("logs"):
        return [title, "(this job has no logs table)"]
    b_min, w_min = job.baseline_seconds("logs") / 60, job.window.seconds / 60
    rows = job.query(f"""
        SELECT entity, message, count(*) FILTER (WHERE {job.in_baseline('logs')}) AS b,
               count(*) FILTER (WHERE {job.in_window()}) AS w, bool_or({ERROR_LIKE}) AS bad
        FROM logs WHERE message IS NOT NULL AND ({job.in_baseline('logs')} OR {job.in_window()})
        GROUP BY entity, message ORDER BY w DESC, b DESC LIMIT 50000""", ERROR_PARAMS)
    folded: dict[tuple[str, str], list] = {}
    for entity, message, b, w, bad in rows:
        f = folded.setdefault((str(entity), template(message)), [0, 0, False])
        f[0] += b
        f[1] += w
        f[2] = f[2] or bad
    lines = []
    for (entity, tmpl), (b, w, bad) in folded.items():
        b_rate = b / b_min if b_min else 0.0
        w_rate = w / w_min if w_min else 0.0
        growth = (w_rate + 0.1) / (b_rate + 0.1)
        tag = "new" if w and not b and b_min else "gone" if b and not w else f"x{growth:.1f}"
        text = (f"{'!' if bad else ' '} {plain(entity, 50)} {quoted(tmpl, 160)}: "
                f"{fmt(b_rate) if b_min else '-'} -> {fmt(w_rate)}/min ({tag})")
        lines.append((-(abs(math.log(growth)) + bad), entity, tmpl, text))
    return [title] + [t for *_, t in sorted(lines)]
