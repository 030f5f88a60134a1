"""The anomalous request and its span tree (RCLAgent §IV-A1: the trace tool builds the graph, no model).

An entry span is a span without a parent in its trace. A request is anomalous when its entry span took
`factor` times (the paper: 100x) the baseline mean of the same entry operation, or carries an error
status. Without baseline traces the window's median of that operation stands in for the mean. When no
request reaches the factor, the most anomalous ones are taken anyway and the reason says so.

The tree folds repeated sibling calls to the same (service, operation) into one node (the slowest call
stands for them, `folded` counts them), keeps at most `max_children` children per node (the slowest),
stops at `max_depth` and keeps at most `max_spans` spans (breadth first), so the number of agents stays
bounded whatever the fan-out.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass, field

from rcagent.job import Job

ERROR_STATUSES = {"error", "err", "2", "status_code_error", "fail", "failed", "false"}


@dataclass
class Span:
    span_id: str
    service: str
    entity: str
    operation: str
    start: object              # datetime of the span's start
    duration_ms: float
    status: str = ""
    children: list["Span"] = field(default_factory=list)
    folded: int = 1            # sibling calls this node stands for
    folded_mean_ms: float = 0.0
    dropped_children: int = 0  # children left out by max_children

    @property
    def error(self) -> bool:
        return is_error(self.status)

    def walk(self):
        yield self
        for child in self.children:
            yield from child.walk()


@dataclass
class Request:
    trace_id: str
    entry: str                 # service and operation of the entry span
    duration_ms: float
    baseline_ms: float
    ratio: float
    error: bool
    reason: str


def is_error(status) -> bool:
    s = str(status or "").strip().lower()
    return s in ERROR_STATUSES or (s.isdigit() and int(s) >= 500)


def _entries(job: Job, where: str) -> list[tuple]:
    return job.query(f"""
        SELECT t.trace_id, coalesce(t.service, t.entity), t.operation, t.duration_ms, t.status
        FROM traces t
        WHERE ({where})
          AND (t.parent_id IS NULL OR t.parent_id = ''
               OR NOT EXISTS (SELECT 1 FROM traces p WHERE p.trace_id = t.trace_id AND p.span_id = t.parent_id))""")


def anomalous_requests(job: Job, factor: float = 100.0, limit: int = 1) -> list[Request]:
    """The requests of the flagged window to diagnose, most anomalous first (errors, then latency ratio)."""
    if not job.rows.get("traces"):
        return []
    window = _entries(job, job.in_window("t.start"))
    if not window:
        return []
    base = _entries(job, job.in_baseline("traces", "t.start"))
    reference: dict[tuple, float] = {}
    source = "baseline mean"
    if base:
        groups: dict[tuple, list[float]] = {}
        for _, svc, op, d, _ in base:
            groups.setdefault((svc, op), []).append(d or 0.0)
        reference = {k: statistics.fmean(v) for k, v in groups.items()}
    if not base or any((svc, op) not in reference for _, svc, op, _, _ in window):
        groups = {}
        for _, svc, op, d, _ in window:
            groups.setdefault((svc, op), []).append(d or 0.0)
        for k, v in groups.items():
            reference.setdefault(k, statistics.median(v))
        source = "baseline mean" if base else "window median (no baseline traces)"
    requests = []
    for trace_id, svc, op, d, status in window:
        ref = reference.get((svc, op)) or 0.0
        ratio = (d or 0.0) / ref if ref > 0 else 0.0
        requests.append(Request(trace_id, f"{svc} {op}", d or 0.0, ref, ratio, is_error(status), ""))
    requests.sort(key=lambda r: (not r.error, -r.ratio, r.trace_id))
    picked = [r for r in requests if r.error or r.ratio >= factor][:limit]
    for r in picked:
        r.reason = ("error status at the entry span" if r.error else
                    f"entry span {r.duration_ms:.0f} ms, {r.ratio:.0f}x its {source} {r.baseline_ms:.0f} ms")
    if picked:
        return picked
    picked = requests[:limit]
    for r in picked:
        r.reason = (f"no request reached {factor:g}x its {source}; the most anomalous one is used: "
                    f"entry span {r.duration_ms:.0f} ms, {r.ratio:.1f}x {r.baseline_ms:.0f} ms")
    return picked


def span_tree(job: Job, trace_id: str, max_children: int = 6, max_depth: int = 6, max_spans: int = 40) -> Span:
    """The request's spans as a tree, repeated sibling calls folded, fan-out, depth and size bounded."""
    rows = job.query("""
        SELECT span_id, parent_id, coalesce(service, entity), entity, operation, start, duration_ms, status
        FROM traces WHERE trace_id = ? ORDER BY start, span_id""", [trace_id])
    if not rows:
        raise ValueError(f"trace {trace_id}: no spans")
    spans = {r[0]: Span(r[0], r[2] or "", r[3] or "", r[4] or "", r[5], r[6] or 0.0, str(r[7] or "")) for r in rows}
    roots = []
    for span_id, parent, *_ in rows:
        if parent and parent in spans and parent != span_id:
            spans[parent].children.append(spans[span_id])
        else:
            roots.append(spans[span_id])
    root = roots[0]
    _shape(root, max_children, max_depth, 1)
    _cap(root, max_spans)
    return root


def _cap(root: Span, max_spans: int) -> None:
    """Keep the first `max_spans` spans in breadth-first order (the ones nearest the entry span)."""
    queue, seen = [root], 0
    while queue:
        span = queue.pop(0)
        seen += 1
        room = max(0, max_spans - seen - len(queue))
        if len(span.children) > room:
            span.dropped_children += len(span.children) - room
            span.children = span.children[:room]
        queue.extend(span.children)


def _shape(node: Span, max_children: int, max_depth: int, depth: int) -> None:
    if depth >= max_depth:
        node.dropped_children += len(node.children)
        node.children = []
        return
    groups: dict[tuple, list[Span]] = {}
    for child in node.children:
        groups.setdefault((child.service, child.operation), []).append(child)
    kept = []
    for members in groups.values():
        # an erroring call, else the slowest, stands for its repeated siblings
        lead = max(members, key=lambda s: (s.error, s.duration_ms))
        lead.folded = len(members)
        lead.folded_mean_ms = statistics.fmean(s.duration_ms for s in members)
        kept.append(lead)
    kept.sort(key=lambda s: (s.error, s.duration_ms), reverse=True)
    node.dropped_children += max(0, len(kept) - max_children)
    node.children = sorted(kept[:max_children], key=lambda s: (str(s.start), s.span_id))
    for child in node.children:
        _shape(child, max_children, max_depth, depth + 1)
