"""Log clusters for the log expert: a graph over an entity's log templates, clustered with Louvain.

Lines of the flagged window and the baseline are folded into templates (variable parts masked). Each
template is a node; two templates are joined when their text is similar (rapidfuzz token-set ratio of at
least SIMILAR), weighted by that similarity decayed by the distance between their median times. Louvain
(python-louvain, seeded) splits the graph into clusters, which are ordered by what changed against the
baseline: new clusters first, then error-like ones, then by growth of their rate.

Bounds: at most MAX_LINES lines per period are read (a seeded reservoir sample; counts are scaled back),
at most MAX_TEMPLATES templates (the most frequent) enter the graph, and each cluster keeps EXAMPLES real
lines, so a huge or repetitive log costs the same as a moderate one.
"""
from __future__ import annotations

import math
import re
import statistics
from dataclasses import dataclass, field

import networkx as nx
from rapidfuzz import fuzz

from rcagent.job import Job
from rcagent.errorlike import is_error_line, one_of
from rcagent.tools.common import template

MAX_LINES = 20_000
MAX_TEMPLATES = 300
MAX_LINE_CHARS = 500
SIMILAR = 60          # token-set ratio (0-100) above which two templates are joined
EXAMPLES = 3
_PRINTABLE = re.compile(r"[^\x09\x20-\x7e\u00a0-\uffff]")


def clean(line: str) -> str:
    """A log line as text: control and binary bytes dropped, whitespace folded, length capped."""
    return re.sub(r"\s+", " ", _PRINTABLE.sub("", line or "")).strip()[:MAX_LINE_CHARS]


@dataclass
class Cluster:
    templates: list[str]
    window: float = 0.0           # lines in the flagged window (scaled back when sampled)
    baseline: float = 0.0
    w_rate: float = 0.0           # lines per minute
    b_rate: float = 0.0
    error_like: bool = False
    examples: list[str] = field(default_factory=list)   # real lines, window first

    @property
    def new(self) -> bool:
        return self.window > 0 and self.baseline == 0

    @property
    def change(self) -> str:
        if self.new:
            return "NEW"
        if self.window == 0:
            return "GONE"
        ratio = (self.w_rate + 0.1) / (self.b_rate + 0.1)
        return f"x{ratio:.1f}"

    @property
    def score(self) -> float:
        growth = abs(math.log2((self.w_rate + 0.1) / (self.b_rate + 0.1)))
        return (100 if self.new else 0) + (20 if self.error_like else 0) + growth


def _lines(job: Job, members: list[str], period: str) -> tuple[list[tuple[float, str, str]], float]:
    """[(epoch seconds, level, line)] of one period (sampled if large) and the factor to scale counts by."""
    where = f"{one_of('entity', 'members')} AND {period}"
    total = job.query(f"SELECT count(*) FROM logs WHERE {where}", {"members": members})[0][0]
    if not total:
        return [], 1.0
    sample = f"USING SAMPLE reservoir({MAX_LINES} ROWS) REPEATABLE (0)" if total > MAX_LINES else ""
    rows = job.query(f"""SELECT epoch(timestamp), coalesce(level, ''), message
                         FROM (SELECT * FROM logs WHERE {where}) {sample}""", {"members": members})
    return [(t, lv, clean(m)) for t, lv, m in rows if m and clean(m)], total / max(len(rows), 1)


def cluster_logs(job: Job, entity: str) -> list[Cluster]:
    """The entity's log clusters (its pods' lines too), most changed first. Empty without log lines."""
    if not job.rows.get("logs"):
        return []
    members = job.members(job.entities[entity])
    window, w_scale = _lines(job, members, job.in_window())
    base, b_scale = _lines(job, members, job.in_baseline("logs"))
    stats: dict[str, dict] = {}
    for lines, key, scale in ((window, "w", w_scale), (base, "b", b_scale)):
        for t, level, line in lines:
            s = stats.setdefault(template(line), {"w": 0.0, "b": 0.0, "times": [], "error": False, "ex_w": [], "ex_b": []})
            s[key] += scale
            s["times"].append(t)
            s["error"] = s["error"] or is_error_line(level, line)
            if len(s[f"ex_{key}"]) < EXAMPLES and line not in s[f"ex_{key}"]:
                s[f"ex_{key}"].append(line)
    if not stats:
        return []
    kept = sorted(stats, key=lambda k: -(stats[k]["w"] + stats[k]["b"]))[:MAX_TEMPLATES]
    graph = nx.Graph()
    graph.add_nodes_from(kept)
    tau = max(job.window.seconds, 60.0)
    medians = {k: statistics.median(stats[k]["times"]) for k in kept}
    for i, a in enumerate(kept):
        for b in kept[i + 1:]:
            similarity = fuzz.token_set_ratio(a, b)
            if similarity >= SIMILAR:
                decay = math.exp(-abs(medians[a] - medians[b]) / tau)
                graph.add_edge(a, b, weight=similarity / 100 * decay + 1e-6)
    partition = _louvain(graph)
    w_min = max(job.window.seconds / 60, 1e-9)
    b_min = job.baseline_seconds("logs") / 60
    clusters: dict[int, Cluster] = {}
    for tmpl in kept:
        s = stats[tmpl]
        c = clusters.setdefault(partition[tmpl], Cluster(templates=[]))
        c.templates.append(tmpl)
        c.window += s["w"]
        c.baseline += s["b"]
        c.error_like = c.error_like or s["error"]
        for line in s["ex_w"] + s["ex_b"]:
            if len(c.examples) < EXAMPLES and line not in c.examples:
                c.examples.append(line)
    for c in clusters.values():
        c.w_rate = c.window / w_min
        c.b_rate = c.baseline / b_min if b_min else 0.0
        c.templates.sort(key=lambda t: -(stats[t]["w"] + stats[t]["b"]))
    return sorted(clusters.values(), key=lambda c: (-c.score, -c.window, c.templates[0]))


def _louvain(graph: nx.Graph) -> dict[str, int]:
    import community  # python-louvain

    if graph.number_of_edges() == 0:
        return {node: i for i, node in enumerate(graph.nodes)}
    return community.best_partition(graph, weight="weight", random_state=0)


def render_clusters(clusters: list[Cluster], limit: int | None = None) -> str:
    """The clustering as text: one block per cluster with its change, rates, templates and real lines."""
    out = []
    for i, c in enumerate(clusters[:limit] if limit else clusters, 1):
        flag = f"{c.change}{' error-like' if c.error_like else ''}"
        out.append(f"cluster {i} [{flag}] {c.w_rate:.1f}/min in window, {c.b_rate:.1f}/min in baseline, "
                   f"{len(c.templates)} templates")
        out += [f"  template: {t[:200]}" for t in c.templates[:3]]
        out += [f"  line: {line[:300]}" for line in c.examples]
    return "\n".join(out)
