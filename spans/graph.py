"""The Global Evidence Graph (RCLAgent §IV-C2) and its picture.

A networkx DiGraph isomorphic to the (folded) span tree: one node per span holding that agent's
self-state evidence and its conclusion, one edge per call. The path is the chain of conclusions from the
entry span down to the span the root agent's conclusion points to. `to_html` draws the tree as inline
SVG in one self-contained HTML file (no script, nothing fetched): abnormal spans red, the path bold.
"""
from __future__ import annotations

import html

import networkx as nx

WIDTH, ROW, BOX_W, BOX_H = 190, 90, 170, 48


def evidence_graph(root, states: dict, conclusions: dict) -> nx.DiGraph:
    g = nx.DiGraph()
    stack = [(root, 0)]
    while stack:
        span, depth = stack.pop()
        g.add_node(span.span_id, depth=depth, **{k: v for k, v in states[span.span_id].items()
                                                  if k not in ("metrics", "logs")},
                   metrics=states[span.span_id]["metrics"], logs=states[span.span_id]["logs"],
                   conclusion=conclusions[span.span_id])
        for child in span.children:
            g.add_edge(span.span_id, child.span_id)
            stack.append((child, depth + 1))
    g.graph["root"] = root.span_id
    return g


def path_to_root_cause(g: nx.DiGraph) -> list[str]:
    """Span ids from the entry span to the span the entry span's conclusion points to (or just the entry)."""
    root = g.graph["root"]
    target = g.nodes[root]["conclusion"].get("points_to")
    if not target or target not in g:
        return [root]
    return nx.shortest_path(g, root, target)


def to_json(g: nx.DiGraph) -> dict:
    return nx.node_link_data(g, edges="edges")


def to_html(g: nx.DiGraph, title: str) -> str:
    """The evidence graph as a self-contained HTML page with an SVG tree."""
    path = set(path_to_root_cause(g))
    path_edges = set(zip(path_to_root_cause(g), path_to_root_cause(g)[1:]))
    pos, next_x = {}, [0]

    def place(node, depth):              # leaves left to right, a parent centred over its children
        kids = list(g.successors(node))
        for k in kids:
            place(k, depth + 1)
        if kids:
            x = sum(pos[k][0] for k in kids) / len(kids)
        else:
            x, next_x[0] = next_x[0], next_x[0] + 1
        pos[node] = (x, depth)

    place(g.graph["root"], 0)
    width = (max(x for x, _ in pos.values()) + 1) * WIDTH + 20
    height = (max(d for _, d in pos.values()) + 1) * ROW + 20
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" height="{height}" font-family="sans-serif" '
             f'font-size="11">']
    for a, b in g.edges:
        (xa, da), (xb, db) = pos[a], pos[b]
        bold = (a, b) in path_edges
        parts.append(f'<line x1="{xa * WIDTH + 10 + BOX_W / 2:.0f}" y1="{da * ROW + 10 + BOX_H}" '
                     f'x2="{xb * WIDTH + 10 + BOX_W / 2:.0f}" y2="{db * ROW + 10}" '
                     f'stroke="{"#b00" if bold else "#999"}" stroke-width="{3 if bold else 1}"/>')
    for node, (x, d) in pos.items():
        data = g.nodes[node]
        fill = "#f8c8c8" if data.get("abnormal") else "#e8f0e8"
        stroke = "#b00" if node in path else "#666"
        tip = html.escape(f"{data.get('key_symptoms', '')}\n{data.get('hypothesis', '')}\n"
                          f"conclusion: {data['conclusion'].get('root_cause')} {data['conclusion'].get('reason', '')}")
        label = html.escape(f"{data.get('label', '')} {data.get('service', '')}"[:30])
        op = html.escape(f"{data.get('operation', '')}"[:30])
        folded = f" x{data['folded']}" if data.get("folded", 1) > 1 else ""
        parts.append(f'<g><title>{tip}</title><rect x="{x * WIDTH + 10:.0f}" y="{d * ROW + 10}" width="{BOX_W}" '
                     f'height="{BOX_H}" rx="6" fill="{fill}" stroke="{stroke}" '
                     f'stroke-width="{3 if node in path else 1}"/>'
                     f'<text x="{x * WIDTH + 16:.0f}" y="{d * ROW + 26}">{label}</text>'
                     f'<text x="{x * WIDTH + 16:.0f}" y="{d * ROW + 40}">{op}</text>'
                     f'<text x="{x * WIDTH + 16:.0f}" y="{d * ROW + 54}">{data.get("duration_ms", 0):.0f} ms{folded}'
                     f'{" ABNORMAL" if data.get("abnormal") else ""}</text></g>')
    parts.append("</svg>")
    steps = " → ".join(html.escape(f"{g.nodes[n].get('label')} {g.nodes[n].get('service')}")
                       for n in path_to_root_cause(g))
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title></head><body>"
            f"<h1>{html.escape(title)}</h1><p>Red boxes: spans their agent found abnormal. Bold: the path from the "
            f"entry span to the root cause: {steps}. Hover a box for its evidence.</p>{''.join(parts)}</body></html>")
