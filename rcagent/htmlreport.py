"""The HTML report: one self-contained page per run (`rcagent report RUN_ID`, `analyze --html`); the batch
evaluation's page (`rcagent report --batch`) is rcagent.eval.evalpage, built on the helpers here. Styles
inline, charts inline SVG, no script and nothing fetched: the file opens on an air-gapped laptop. Every
text from the job or the model is HTML-escaped.

A run's page: the diagnosis (ranked root causes, root cause, solution, responsibility, the change that
preceded the top cause), how the job was read (its warnings: a table not compared, no baseline given), the
evidence (the diagnosis' evidence lines; the most moved metric series of the top causes, baseline against
window, the window shaded; the stored snapshots, expandable), the investigation (each step: thought, action,
arguments, verdict, repairs, observation head, linked to its snapshot; span mode's and graph mode's pictures
and walk), and the run's figures with what was redacted.
"""
from __future__ import annotations

import datetime as dt
import html
import json
import re
from pathlib import Path

STYLE = """
body{font:14px/1.45 system-ui,sans-serif;margin:0 auto;max-width:1100px;padding:16px 24px;color:#222}
h1{font-size:22px}h2{font-size:17px;border-bottom:1px solid #ddd;padding-bottom:4px;margin-top:28px}
table{border-collapse:collapse;margin:8px 0}td,th{border:1px solid #ddd;padding:3px 8px;text-align:left;
vertical-align:top}th{background:#f4f4f4}pre{background:#f7f7f7;padding:8px;overflow-x:auto;white-space:pre-wrap;
font-size:12px}details{margin:4px 0}summary{cursor:pointer}.bad{color:#b00}.ok{color:#070}.muted{color:#777}
ol.steps>li{margin-bottom:12px}.chart{display:inline-block;margin:4px 12px 4px 0}.figures td{border:none;padding:1px 10px 1px 0}
"""
CHART_W, CHART_H, PAD = 320, 110, 26


def esc(value) -> str:
    return html.escape("" if value is None else str(value), quote=True)


def table(headers: list[str], rows: list[list], cls: str = "") -> str:
    head = "<tr>" + "".join(f"<th>{esc(h)}</th>" for h in headers) + "</tr>" if any(headers) else ""
    body = "".join("<tr>" + "".join(f"<td>{c if isinstance(c, Raw) else esc(c)}</td>" for c in row) + "</tr>"
                   for row in rows)
    return f'<table class="{cls}">{head}{body}</table>'


class Raw(str):
    """HTML this module wrote itself (a link, a chart): placed as it is."""


def page(title: str, body: str) -> str:
    return (f'<!doctype html><html lang="en"><head><meta charset="utf-8"><title>{esc(title)}</title>'
            f'<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; style-src \'unsafe-inline\'; '
            f'img-src data:"><style>{STYLE}</style></head><body>{body}</body></html>')


# ---- charts ---------------------------------------------------------------------------------------------
def chart(title: str, points: list[tuple[dt.datetime, float]], window: tuple[dt.datetime, dt.datetime],
          baseline: list[tuple[dt.datetime, dt.datetime]]) -> str:
    """A small line chart (inline SVG) of a series: the flagged window shaded red, baseline periods grey."""
    if not points:
        return ""
    t0 = min([points[0][0], window[0], *(a for a, _ in baseline)])
    t1 = max([points[-1][0], window[1], *(b for _, b in baseline)])
    span = max((t1 - t0).total_seconds(), 1.0)
    values = [v for _, v in points]
    lo, hi = min(values), max(values)
    hi = hi if hi > lo else lo + 1.0

    def x(t):
        return PAD + (CHART_W - 2 * PAD) * (t - t0).total_seconds() / span

    def y(v):
        return CHART_H - PAD + (2 * PAD - CHART_H) * (v - lo) / (hi - lo) + 8

    shades = "".join(f'<rect class="baseline" x="{x(a):.1f}" y="8" width="{max(x(b) - x(a), 1):.1f}" '
                     f'height="{CHART_H - PAD - 8}" fill="#eee"/>' for a, b in baseline)
    shades += (f'<rect class="window" x="{x(window[0]):.1f}" y="8" width="{max(x(window[1]) - x(window[0]), 1):.1f}" '
               f'height="{CHART_H - PAD - 8}" fill="#fdd"/>')
    line = " ".join(f"{x(t):.1f},{y(v):.1f}" for t, v in points)
    return Raw(
        f'<svg class="chart" width="{CHART_W}" height="{CHART_H + 14}" role="img" aria-label="{esc(title)}">'
        f'<text x="{PAD}" y="{CHART_H + 10}" font-size="10">{esc(title[:64])}</text>{shades}'
        f'<polyline points="{line}" fill="none" stroke="#246" stroke-width="1.3"/>'
        f'<text x="2" y="14" font-size="9" fill="#777">{hi:.3g}</text>'
        f'<text x="2" y="{CHART_H - PAD + 8}" font-size="9" fill="#777">{lo:.3g}</text></svg>')


def moved_series(job, entity: str, limit: int = 3) -> list[tuple[str, list]]:
    """The entity's (and its members') metric series that moved most, window mean against baseline mean
    in baseline standard deviations, each with its points (at most 400, evenly thinned)."""
    members = job.members(job.entities[entity]) if entity in job.entities else [entity]
    if not job.rows.get("metrics"):
        return []
    rows = job.query(f"""
        WITH s AS (SELECT entity, metric,
                avg(value) FILTER (WHERE {job.in_window()}) AS w,
                avg(value) FILTER (WHERE {job.in_baseline('metrics')}) AS b,
                stddev_pop(value) FILTER (WHERE {job.in_baseline('metrics')}) AS sd
            FROM metrics WHERE list_contains($members, entity) AND value IS NOT NULL GROUP BY 1, 2)
        SELECT entity, metric FROM s WHERE w IS NOT NULL
        ORDER BY abs(w - coalesce(b, w)) / (coalesce(sd, 0) + abs(coalesce(b, 0)) * 0.05 + 1e-9) DESC,
                 entity, metric LIMIT {int(limit)}""", {"members": members})
    out = []
    for ent, metric in rows:
        points = job.query("SELECT timestamp, value FROM metrics WHERE entity = $e AND metric = $m AND value IS NOT NULL "
                           "ORDER BY timestamp", {"e": ent, "m": metric})
        step = max(1, len(points) // 400)
        out.append((f"{metric} · {ent}", points[::step]))
    return out


# ---- a run's page ---------------------------------------------------------------------------------------
def _svg_of(picture: str | None) -> str:
    """The inline SVG of a span-mode or graph-mode picture file, when it is still there."""
    if not picture or not Path(picture).is_file():
        return ""
    text = Path(picture).read_text(errors="replace")
    m = re.search(r"<svg\b.*</svg>", text, re.S)
    return m.group(0) if m else ""


def run_page(store, run_id: str) -> str:
    from rcagent.errors import BadInput

    run = store.get_run(run_id)
    if run is None:
        raise BadInput(f"no run {run_id!r} in {store.path} (or the prefix names more than one; see rcagent runs)")
    d = json.loads(run["diagnosis"]) if run.get("diagnosis") else {}
    steps, snapshots = store.steps(run["id"]), store.snapshot_keys(run["id"])
    job = _job_of(run)
    causes = d.get("root_causes") or []
    parts = [f"<h1>Diagnosis of {esc(run['job'])}</h1>",
             f'<p class="muted">run {esc(run["id"])} · {esc(run.get("mode"))} mode · {esc(run["status"])} · '
             f'started {esc(run["started"])}</p>', '<h2 id="diagnosis">Diagnosis</h2>']
    parts.append(table(["rank", "entity", "kind", "score"],
                       [[i + 1, c["entity"], c.get("kind"), c.get("score")] for i, c in enumerate(causes)], "causes")
                 if causes else "<p>No root cause was named.</p>")
    parts += [f'<p><b>Root cause.</b> <span class="root-cause">{esc(d.get("root_cause"))}</span></p>',
              f'<p><b>Solution.</b> <span class="solution">{esc(d.get("solution"))}</span></p>',
              f'<p><b>Responsibility.</b> {esc(d.get("responsibility"))}</p>']
    change = _preceding_change(job, causes[0]["entity"]) if job is not None and causes else None
    if change:
        parts.append(f'<p class="change"><b>Change before it.</b> {esc(change)}</p>')
    if d.get("model_root_causes"):
        parts.append(f'<p class="muted">The model named {esc(", ".join(d["model_root_causes"]))}; the ranking '
                     f'adds the evidence ranking.</p>')

    if d.get("warnings"):
        parts.append('<h2 id="read">How the job was read</h2><ul class="warnings">'
                     + "".join(f"<li>{esc(w)}</li>" for w in d["warnings"]) + "</ul>")
    parts.append('<h2 id="evidence">Evidence</h2><ul class="evidence">')
    parts += [f"<li>{esc(e)}</li>" for e in d.get("evidence") or []] or ["<li>none cited</li>"]
    parts.append("</ul>")
    if job is not None:
        series = {}   # a service and its pod share series: each is drawn once
        for c in causes[:3]:
            for title, pts in moved_series(job, c["entity"]):
                series.setdefault(title, pts)
        charts = [chart(title, pts, (job.window.start, job.window.end),
                        [(p.start, p.end) for p in job.baseline if "metrics" in p.tables])
                  for title, pts in series.items()]
        charts = [c for c in charts if c]
        if charts:
            parts.append('<p class="muted">The most moved series of the top causes (window shaded red, '
                         'baseline grey):</p><div class="charts">' + "".join(charts) + "</div>")
        job.con.close()
    else:
        parts.append('<p class="muted">The job folder is no longer where the run read it: no charts.</p>')
    if snapshots:
        parts.append("<h3>Snapshots</h3>")
        for k in snapshots:
            text = store.snapshot(run["id"], k["key"]) or ""
            parts.append(f'<details class="snapshot" id="snap-{esc(k["key"])}"><summary>{esc(k["key"])} · step '
                         f'{esc(k["step"])} · {esc(k["tool"])} · {esc(k["chars"])} characters</summary>'
                         f"<pre>{esc(text)}</pre></details>")

    parts.append('<h2 id="investigation">Investigation</h2><ol class="steps">')
    for s in steps:
        verdict = ('<span class="ok">valid</span>' if s["valid"]
                   else f'<span class="bad">invalid ({esc(s.get("handler") or "rejected")})</span>')
        item = [f'<li class="step" id="step-{esc(s["step"])}"><b>{esc(s["action"])}</b> '
                f'<code>{esc(s.get("arguments") or "")}</code> · {verdict}']
        if s.get("thought"):
            item.append(f'<div class="thought">thought: {esc(s["thought"])}</div>')
        if s.get("repairs"):
            rounds = json.loads(s["repairs"])
            item.append("<div>repair: " + esc(", ".join(f"{r['method']} {'ok' if r['ok'] else 'failed'}"
                                                        for r in rounds)) + "</div>")
        if s.get("error"):
            item.append(f'<div class="bad">error: {esc(s["error"])}</div>')
        if s.get("snapshot"):
            item.append(f'<div>stored as <a href="#snap-{esc(s["snapshot"])}">{esc(s["snapshot"])}</a></div>')
        if s.get("observation"):
            item.append(f"<pre>{esc(s['observation'][:1500])}</pre>")
        parts.append("".join(item) + "</li>")
    parts.append("</ol>")
    for key, what in (("span", "The evidence graph of span mode"), ("graph", "The walk over the anomaly graph")):
        svg = _svg_of((d.get(key) or {}).get("picture"))
        if svg:
            parts.append(f'<h3>{what}</h3><div class="picture">{svg}</div>')
    walk = store.walk_events(run["id"])
    if walk:
        parts.append(table(["#", "event", "node", "detail"],
                           [[w["seq"], w["kind"], w["node"], w["detail"][:300]] for w in walk], "walk"))

    figures = [["model", f"{d.get('backend', run['backend'])} / {d.get('model', run['model'])}"],
               ["steps", f"{d.get('steps', len(steps))} ({d.get('invalid_steps', 0)} invalid, "
                         f"{d.get('repaired_steps', 0)} repaired)"],
               ["model calls", d.get("llm_calls", 0)],
               ["tokens", f"{d.get('prompt_tokens', 0)} prompt + {d.get('completion_tokens', 0)} completion"],
               ["time", f"{d.get('wall_s', 0):.1f} s"],
               ["redacted", ", ".join(f"{n} {k}" for k, n in (d.get("redacted") or {}).items()) or "nothing"]]
    parts.append('<h2 id="figures">The run</h2>' + table(["", ""], figures, "figures"))
    return page(f"rcagent: {run['job']}", "".join(parts))


def _job_of(run: dict):
    """The run's job, loaded as the run loaded it (redacted unless the run turned that off), or None."""
    from rcagent.errors import BadInput
    from rcagent.job import Job

    settings = json.loads(run.get("settings") or "{}")
    try:
        return Job.load(run["job_path"], redact=settings.get("redact", True))
    except BadInput:
        return None


def _preceding_change(job, entity: str) -> str | None:
    from rcagent.tools.change_signals import latest_changes

    ent = job.entities.get(entity)
    name = ent.service if ent and ent.kind == "pod" and ent.service else entity   # a pod's change is its service's
    change = latest_changes(job).get(name)
    if not change:
        return None
    latest, reason, first, first_reason = change
    text = f"{reason or 'change'} of {name} at {latest:%Y-%m-%d %H:%M:%S} UTC"
    return text + (f" (began {first:%H:%M:%S} with {first_reason or 'a change'})" if first != latest else "")
