"""The anomaly fusion graph with the walk drawn on it: one self-contained HTML file, inline SVG, no script.

Services (and every node the walk visited) in rows by their call distance from the walk's start; the
others in a last row. Fill by the node's health (white = nothing moved, red = the job's most anomalous);
border by the diagnoser's verdict (red root cause, orange refuted, amber propagator, green healthy); the
walk's moves numbered in blue; a black ring around what the walk concluded with. Hover a node for its
evidence and verdict.
"""
from __future__ import annotations

import html

import networkx as nx

W, ROW, BOX_W, BOX_H, PER_ROW = 180, 90, 160, 44, 8
BORDER = {"root_cause": "#c00", "refuted": "#e80", "propagator": "#c90", "healthy": "#393"}


def _rows(g: nx.DiGraph, start: str, shown: list[str]) -> list[list[str]]:
    calls = nx.DiGraph([(u, v) for u, v, d in g.edges(data=True) if d["kind"] in ("calls", "runs", "placed")])
    calls.add_nodes_from(shown)
    depth = nx.single_source_shortest_path_length(calls, start) if start in calls else {}
    rows: dict[int, list[str]] = {}
    last = max(depth.values(), default=0) + 1
    for n in shown:
        rows.setdefault(depth.get(n, last), []).append(n)
    out = []
    for d in sorted(rows):
        names = sorted(rows[d])
        out += [names[i:i + PER_ROW] for i in range(0, len(names), PER_ROW)]
    return out


def to_html(g: nx.DiGraph, walk: dict, title: str, concluded: str | None = None) -> str:
    """`concluded`: the node the walk concluded with (verified or best supported), drawn with a double border."""
    visited = walk["visited"]
    verdicts = {e["node"]: e["detail"]["state"] for e in walk["events"] if e["kind"] == "visit"}
    refuted = {e["node"] for e in walk["events"] if e["kind"] == "verify" and not e["detail"]["passed"]}
    shown = sorted({n for n, d in g.nodes(data=True) if d["kind"] == "service"} | set(visited))
    start = visited[0] if visited else (shown[0] if shown else "")
    rows = _rows(g, start, shown)
    pos = {n: (i, r) for r, names in enumerate(rows) for i, n in enumerate(names)}
    width = max((len(r) for r in rows), default=1) * W + 20
    height = len(rows) * ROW + 20
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" '
             f'font-size="11">']

    def centre(n):
        i, r = pos[n]
        return i * W + 10 + BOX_W / 2, r * ROW + 10 + BOX_H / 2

    taken = [(e["detail"]["via"], e["node"]) for e in walk["events"] if e["kind"] == "visit" and e["detail"]["via"]]
    for u, v, d in g.edges(data=True):
        if u in pos and v in pos and d["kind"] == "calls":
            (x1, y1), (x2, y2) = centre(u), centre(v)
            parts.append(f'<line x1="{x1:.0f}" y1="{y1:.0f}" x2="{x2:.0f}" y2="{y2:.0f}" stroke="#bbb"/>')
    for k, (u, v) in enumerate(taken):
        if u not in pos or v not in pos:
            continue
        (x1, y1), (x2, y2) = centre(u), centre(v)
        parts.append(f'<line x1="{x1:.0f}" y1="{y1:.0f}" x2="{x2:.0f}" y2="{y2:.0f}" stroke="#06c" stroke-width="3"/>'
                     f'<text x="{(x1 + x2) / 2 + 4:.0f}" y="{(y1 + y2) / 2:.0f}" fill="#06c">{k + 1}</text>')
    for n, (i, r) in pos.items():
        h = g.nodes[n]["health"]
        red = int(255 - 120 * h.health)
        state = "refuted" if n in refuted else verdicts.get(n)
        border = BORDER.get(state, "#888")
        tip = html.escape(f"{n} ({g.nodes[n]['kind']}), score {h.score:.0f}\n"
                          + "\n".join(s.reason for s in h.signals[:4])
                          + (f"\nverdict: {state}" if state else ""))
        ring = (f'<rect x="{i * W + 6}" y="{r * ROW + 6}" width="{BOX_W + 8}" height="{BOX_H + 8}" rx="8" '
                f'fill="none" stroke="#000" stroke-width="2" class="concluded"/>' if n == concluded else "")
        parts.append(f'<g><title>{tip}</title>{ring}<rect x="{i * W + 10}" y="{r * ROW + 10}" width="{BOX_W}" '
                     f'height="{BOX_H}" rx="6" fill="rgb(255,{red},{red})" stroke="{border}" '
                     f'stroke-width="{3 if state else 1}"/>'
                     f'<text x="{i * W + 16}" y="{r * ROW + 28}">{html.escape(n[:26])}</text>'
                     f'<text x="{i * W + 16}" y="{r * ROW + 44}">{html.escape((state or "")[:26])}'
                     f'{" #" + str(visited.index(n) + 1) if n in visited else ""}</text></g>')
    parts.append("</svg>")
    steps = []
    for e in walk["events"]:
        d = e["detail"]
        if e["kind"] == "visit":
            steps.append(f"visit {e['node']}: {d['state']} ({d['confidence']:.2f}, {d['source']}) {d['reason']}")
        elif e["kind"] == "verify":
            checks = ", ".join(f"{k} {c['score']:.2f}" for k, c in d["checks"].items())
            steps.append(f"verify {e['node']}: Vscore {d['score']:.2f} ({checks}) "
                         f"{'passed' if d['passed'] else 'refuted: ' + d['critique']}")
        elif e["kind"] == "move":
            steps.append(f"move {d['src']} -> {e['node']} (gradient {d['gradient']:.2f})")
        else:
            steps.append(f"{e['kind']} {e['node']}" + (f": {d['why']}" if d.get("why") else ""))
    if concluded:
        steps.append(f"concluded: {concluded}" + ("" if walk.get("root") else " (best supported; none verified)"))
    listing = "".join(f"<li>{html.escape(s)}</li>" for s in steps)
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title></head><body>"
            f"<h1>{html.escape(title)}</h1><p>Fill: how far the node moved from its baseline. Border: the "
            f"diagnoser's verdict (red root cause, orange refuted by the verifier, amber propagator, green healthy). "
            f"Blue: the walk's moves, numbered. Black ring: what the walk concluded with. Hover a node for its "
            f"evidence.</p>{''.join(parts)}"
            f"<h2>The walk</h2><ol>{listing}</ol></body></html>")
