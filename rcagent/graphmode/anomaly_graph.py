"""The anomaly fusion graph (GAMA §4.1): the job's entities as nodes carrying their health evidence, calls and
placements as edges carrying their traffic statistics.

Nodes are the inventory's services, pods, nodes and other entities. Edges: `calls` between services (from
the traces where the job has them, with the window's statistics against the baseline; else from the
relations table, without statistics), `runs` from a service to its pods and `placed` from a pod to its node.
A node's evidence is the overview's signals of it, each sorted into a golden signal (latency, traffic,
errors, saturation) or a change or a log signal; its error-like log lines of the window are attached to
the node and, where they can be (graphmode.align), to the call edge they are about.

The fault gradient of an edge (what the navigator follows) is fixed here, before any measurement: the mean
of the call's latency deviation, error propagation and traffic volatility, each in 0..1, averaged with
the target's health (its overview score over the job's highest, or half the highest health of what the
target reaches, if that is more: a gateway's calls, averaged over all its routes, barely move when one
route two hops down fails). An edge without statistics (relations, placement) has only the target's health.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

import networkx as nx

from rcagent.errorlike import ERR, ERROR_LIKE, ERROR_PARAMS
from rcagent.job import Job
from rcagent.tools.call_signals import traffic_factor
from rcagent.tools.calls import edges as edges_table
from rcagent.tools.overview import ranking, scores

ENTRY = "(entry)"
LOOKAHEAD = 0.5          # weight of the health of what an edge's target reaches, beside the target's own
LOG_LINES = 40            # error-like log templates kept per job (most frequent in the window first)

# which golden signal an overview signal speaks of, from the words of its reason (the overview's own text)
_KINDS = [("change", re.compile(r"(?i)(deploy|rollout|release|config|scal|upgrade|rollback|then its service degraded)")),
          ("errors", re.compile(r"(?i)(error|fail|exception|success|status)")),
          ("traffic", re.compile(r"(?i)(incoming calls|request|qps|throughput|line stopped)")),
          ("latency", re.compile(r"(?i)(latency|duration|response.?time|own time|gap|p9\d|slow)")),
          ("saturation", re.compile(r"(?i)(cpu|mem|disk|fs_|file|io|net|network|receive|transmit|thread|"
                                    r"load|swap|socket|connection|pool|usage|util)"))]
# a signal that measures what the entity waits for, not what it does itself
_EXTRINSIC = re.compile(r"(?i)(waiting on callees|as much as its callee|client)")


def signal_kind(reason: str, source: str) -> str:
    if source == "changes":
        return "change"
    for kind, pattern in _KINDS:
        if pattern.search(reason):
            return kind
    return "logs" if source == "logs" else "saturation" if source == "metrics" else "traffic"


@dataclass
class Signal:
    score: float
    reason: str
    source: str          # metrics, calls, logs, changes (the overview's)
    kind: str            # latency, traffic, errors, saturation, change, logs
    intrinsic: bool      # False for a signal of waiting on a callee or measured by a client


@dataclass
class Health:
    """One node's evidence."""
    signals: list[Signal] = field(default_factory=list)
    logs: list[tuple[str, int, int]] = field(default_factory=list)   # (line, baseline count, window count)
    score: float = 0.0                  # the overview's score
    health: float = 0.0                 # score over the job's highest (0..1)

    @property
    def intrinsic(self) -> float:
        return max((s.score for s in self.signals if s.intrinsic), default=0.0)

    def kinds(self) -> set[str]:
        return {s.kind for s in self.signals}


def _clip(x: float) -> float:
    return max(0.0, min(1.0, x))


def build(job: Job) -> nx.DiGraph:
    """The graph of `job`; graph attributes: `traced` (call edges from traces), `top` (highest score)."""
    g = nx.DiGraph()
    ranked = {e: s for e, s, _ in ranking(job)}
    top = max(ranked.values(), default=0.0) or 1.0
    sig = scores(job)
    for name, ent in sorted(job.entities.items()):
        h = Health(score=ranked.get(name, 0.0), health=_clip(ranked.get(name, 0.0) / top))
        h.signals = [Signal(round(s, 1), r, src, signal_kind(r, src), not _EXTRINSIC.search(r))
                     for s, r, src in sig.get(name, [])]
        g.add_node(name, kind=ent.kind, health=h)
    for name, ent in job.entities.items():
        if ent.kind == "pod" and ent.service in g:
            g.add_edge(ent.service, name, kind="runs")
        if ent.kind == "pod" and ent.node in g:
            g.add_edge(name, ent.node, kind="placed")
    traced = _trace_edges(job, g)
    if not traced and job.rows.get("relations"):
        for src, dst in job.query("SELECT DISTINCT src, dst FROM relations WHERE lower(kind) LIKE 'call%'"):
            if src in g and dst in g and src != dst and not g.has_edge(src, dst):
                g.add_edge(src, dst, kind="calls")
    _attach_logs(job, g)
    below = mark_reach(g)
    for u, v, data in g.edges(data=True):
        data.setdefault("stats", None)
        data["gradient"] = gradient(data.get("stats"), max(g.nodes[v]["health"].health, LOOKAHEAD * below[v]))
    g.graph.update(traced=traced, top=top)
    return g


def mark_reach(g: nx.DiGraph) -> dict[str, float]:
    """Node attribute `below`: the highest health among what a node reaches (calls, directly or not, runs)."""
    below = {n: max((g.nodes[m]["health"].health for m in nx.descendants(g, n)), default=0.0) for n in g}
    nx.set_node_attributes(g, below, "below")
    return below


def gradient(stats: dict | None, target_health: float) -> float:
    if not stats:
        return round(target_health, 3)
    edge = (stats["latency_dev"] + stats["error_rate"] + stats["volatility"]) / 3
    return round((edge + target_health) / 2, 3)


def _trace_edges(job: Job, g: nx.DiGraph) -> bool:
    """Call edges between services from the spans, with their statistics; False if the job has no traces
    in both the baseline and the window."""
    if not (job.rows.get("traces") and job.observed_seconds("traces")):
        return False
    edges_table(job)
    b_min = job.observed_seconds("traces", window=False) / 60
    w_min = job.observed_seconds("traces") / 60
    load = traffic_factor(job)
    win, base = job.in_window("start"), job.in_baseline("traces", "start")
    rows = job.query(f"""
        SELECT caller, callee, count(*) FILTER (WHERE {base}), count(*) FILTER (WHERE {win}),
               count(*) FILTER (WHERE {base} AND {ERR}), count(*) FILTER (WHERE {win} AND {ERR}),
               quantile_cont(duration_ms, 0.95) FILTER (WHERE {base}),
               quantile_cont(duration_ms, 0.95) FILTER (WHERE {win})
        FROM edges WHERE ({base} OR {win}) AND callee IS NOT NULL GROUP BY 1, 2""")
    found = False
    # an entity standing for the users' side (kind entry: the front door's metrics) calls what the entry
    # spans call
    doors = [n for n, d in g.nodes(data=True) if d["kind"] == "entry"]
    for caller, callee, b, w, be, we, b95, w95 in rows:
        if callee not in g or (caller != ENTRY and caller not in g) or caller == callee:
            continue
        if caller == ENTRY:
            g.nodes[callee]["entry_calls"] = w
        for src in doors if caller == ENTRY else [caller]:
            g.add_edge(src, callee, kind="calls", stats=_stats(b, w, be, we, b95, w95, b_min, w_min, load))
            found = True
    return found


def _stats(b, w, be, we, b95, w95, b_min, w_min, load) -> dict:
    """A call edge's statistics, window against baseline, and its three gradient components in 0..1:
    latency deviation (log2 of the p95 ratio over 3: 8x slower is 1), error propagation (the rise of the
    failed share), traffic volatility (|log2| of the rate ratio over 3, the baseline scaled by user traffic)."""
    b_rate = load * b / b_min if b_min else None
    w_rate = w / w_min if w_min else 0.0
    stats = {"rate_base": None if b_rate is None else round(b_rate, 2), "rate_window": round(w_rate, 2),
             "errors_base": be, "errors_window": we,
             "p95_base": None if b95 is None else round(b95, 1), "p95_window": None if w95 is None else round(w95, 1)}
    lat = math.log2(w95 / b95) / 3 if b95 and w95 and b95 > 0 else 0.0
    share_b, share_w = (be / b if b else 0.0), (we / w if w else 0.0)
    stats["latency_dev"] = round(_clip(lat), 3)
    stats["error_rate"] = round(_clip(share_w - share_b), 3)
    stats["volatility"] = round(_clip(abs(math.log2((w_rate + 1) / (b_rate + 1))) / 3), 3) if b_rate is not None else 0.0
    return stats


def _attach_logs(job: Job, g: nx.DiGraph) -> None:
    """The window's most frequent error-like log lines, per node (their counts before and during); which
    call edge each is about is decided by graphmode.align."""
    if not job.rows.get("logs"):
        return
    base, win = job.in_baseline("logs"), job.in_window()
    rows = job.query(f"""
        SELECT entity, left(message, 200) AS line, count(*) FILTER (WHERE {base}), count(*) FILTER (WHERE {win})
        FROM logs WHERE {ERROR_LIKE} AND ({win} OR {base}) GROUP BY 1, 2
        HAVING count(*) FILTER (WHERE {win}) > 0 ORDER BY 4 DESC, 1, 2 LIMIT {LOG_LINES}""", ERROR_PARAMS)
    for entity, line, b, w in rows:
        if entity in g:
            g.nodes[entity]["health"].logs.append((line, b, w))


def service_of(job: Job, name: str) -> str:
    ent = job.entities.get(name)
    return ent.service if ent is not None and ent.kind == "pod" and ent.service in job.entities else name


def start_node(job: Job, g: nx.DiGraph) -> tuple[str, str]:
    """Where the walk starts, and why: the entity the alert names (the longest name found in its text that
    leads somewhere), else the service receiving the most entry requests, else a service nothing calls with the most
    evidence, else the top of the overview."""
    alert = job.alert or ""
    named = [n for n in g if n and any(True for _ in g.successors(n))
             and re.search(rf"(?<![\w-]){re.escape(n)}(?![\w-])", alert)]
    if named:
        best = max(named, key=lambda n: (g.nodes[n]["kind"] == "service", len(n), n))
        return best, "named by the alert"
    entry = [(d.get("entry_calls", 0), n) for n, d in g.nodes(data=True) if d.get("entry_calls")]
    if entry:
        return max(entry)[1], "receives the most entry requests"
    roots = [n for n, d in g.nodes(data=True) if d["kind"] == "service"
             and not any(g.edges[p, n]["kind"] == "calls" for p in g.predecessors(n))
             and any(g.edges[n, c]["kind"] == "calls" for c in g.successors(n))]
    if roots:
        return max(roots, key=lambda n: (g.nodes[n]["health"].score, n)), "calls others and nothing calls it"
    ranked = ranking(job)
    if ranked:
        return ranked[0][0], "moved most (no alert entity, entry or topology)"
    return sorted(g)[0], "the first entity (nothing moved)"


def report(g: nx.DiGraph, node: str, limit: int = 6) -> str:
    """The template health report of a node: its signals by golden signal, its error log lines."""
    h: Health = g.nodes[node]["health"]
    kind = g.nodes[node]["kind"]
    if not h.signals and not h.logs:
        return f"{node} ({kind}): nothing moved from its baseline."
    parts = [f"{node} ({kind}), anomaly score {h.score:.0f}:"]
    for s in h.signals[:limit]:
        parts.append(f"- {s.kind}: {s.reason}" + ("" if s.intrinsic else " (measured outside it)"))
    for line, b, w in h.logs[:3]:
        parts.append(f"- log ({b} before, {w} in the window): {line[:160]}")
    return "\n".join(parts)


def edge_line(g: nx.DiGraph, u: str, v: str) -> str:
    data = g.edges[u, v]
    st = data.get("stats")
    if not st:
        return f"{u} -> {v} ({data['kind']}): gradient {data['gradient']:.2f} (no call statistics; target health)"
    rate = "?" if st["rate_base"] is None else f"{st['rate_base']:.0f}"
    text = (f"{u} -> {v}: calls {rate}->{st['rate_window']:.0f}/min, errors {st['errors_base']}->{st['errors_window']}, "
            f"p95 {st['p95_base']}->{st['p95_window']} ms; gradient {data['gradient']:.2f}")
    if data.get("logs"):
        text += f"; {len(data['logs'])} error log lines linked"
    return text
