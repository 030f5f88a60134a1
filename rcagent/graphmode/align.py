"""Which call a log line is about (GAMA §4.1.1, Algorithm 1, on the graph's call edges).

Each error-like log line attached to a node is linked to one call edge of its service:
1. by trace: the line carries trace ids that the edge's spans share (the edge most of them share);
2. else the service's only call edge, or, by time and service: among the service's call edges, the calls within DELTA_S of the line's
   occurrences that failed or were slower than the edge's baseline p95 (each edge's share of them), averaged
   with the line's semantic similarity to the edge's peer service and operations (MiniLM embeddings, shipped
   in a PyPI package; rapidfuzz's token ratio where it is not installed). A clear winner (by MARGIN) is taken;
3. the ambiguous rest goes to the model as arbitrator (one short call choosing among the edges), at most
   `max_arbitrations` per run; what remains stays on the node only.
The counts of each way are reported with the diagnosis.
"""
from __future__ import annotations

import datetime as dt
from typing import Callable

import networkx as nx

from rcagent.errorlike import ERR
from rcagent.graphmode.anomaly_graph import service_of
from rcagent.job import Job

DELTA_S = 5.0     # a call this close to a log line's occurrence may be what the line is about
MARGIN = 0.15     # the best edge's score must beat the second's by this much to be taken without the model
OCCURRENCES = 30  # occurrences of a line looked at


def _similarity():
    """cosine similarity of texts by MiniLM, or a token ratio where the eval extra is not installed."""
    try:
        from rcagent.embedding import embedder

        model = embedder()
    except Exception:   # BadInput without the extra; any load failure: the token ratio still works
        from rapidfuzz import fuzz

        return lambda a, bs: [fuzz.token_set_ratio(a, b) / 100 for b in bs], "token ratio"

    def cosine(a: str, bs: list[str]) -> list[float]:
        vectors = model.encode([a, *bs], normalize_embeddings=True)
        return [float(max(0.0, vectors[0] @ v)) for v in vectors[1:]]
    return cosine, "MiniLM"


def align(job: Job, g: nx.DiGraph, arbiter: Callable[[str, str, list[str]], int | None] | None = None,
          max_arbitrations: int = 3) -> dict:
    """Link the nodes' log lines to call edges (edge attribute `logs`); returns the counts by way.
    `arbiter(line, service, edge labels)` -> the chosen index or None: the model's arbitration."""
    counts = {"trace": 0, "only_edge": 0, "time_semantic": 0, "arbitrated": 0, "node_only": 0, "similarity": None}
    calls = [(u, v) for u, v, d in g.edges(data=True) if d["kind"] == "calls" and d.get("stats")]
    if not calls:
        counts["node_only"] = sum(len(d["health"].logs) for _, d in g.nodes(data=True))
        return counts
    has_trace = bool(job.rows.get("logs")) and "trace_id" in {
        r[0] for r in job.query("SELECT column_name FROM (DESCRIBE logs)")}
    similarity = None
    for node, data in g.nodes(data=True):
        service = service_of(job, node)
        mine = [(u, v) for u, v in calls if service in (u, v)]
        for line, _, _ in data["health"].logs:
            if not mine:
                counts["node_only"] += 1
                continue
            edge = _by_trace(job, line, node, service, mine) if has_trace else None
            way = "trace"
            if edge is None and len(mine) == 1:
                edge, way = mine[0], "only_edge"
            if edge is None:
                if similarity is None:
                    similarity, counts["similarity"] = _similarity()
                edge, way = _by_time_and_meaning(job, g, line, node, service, mine, similarity), "time_semantic"
            if edge is None and arbiter is not None and counts["arbitrated"] < max_arbitrations:
                labels = [f"{u} calls {v}" for u, v in mine]
                choice = arbiter(line, service, labels)
                counts["arbitrated"] += 1
                if choice is not None and 0 <= choice < len(mine):
                    edge, way = mine[choice], None
            if edge is None:
                counts["node_only"] += 1
                continue
            if way:
                counts[way] += 1
            g.edges[edge].setdefault("logs", []).append({"line": line, "from": node, "by": way or "model"})
    return counts


def _by_trace(job: Job, line: str, entity: str, service: str, mine: list[tuple[str, str]]):
    rows = job.query(f"""
        WITH ids AS (SELECT DISTINCT trace_id FROM logs WHERE entity = $entity AND left(message, 200) = $line
                     AND trace_id IS NOT NULL AND {job.in_window()} LIMIT {OCCURRENCES})
        SELECT caller, callee, count(*) FROM edges JOIN ids USING (trace_id)
        WHERE caller = $svc OR callee = $svc GROUP BY 1, 2 ORDER BY 3 DESC, 1, 2""",
                     {"entity": entity, "line": line, "svc": service})
    for caller, callee, _ in rows:
        if (caller, callee) in mine:
            return caller, callee
    return None


def _by_time_and_meaning(job: Job, g: nx.DiGraph, line: str, entity: str, service: str,
                         mine: list[tuple[str, str]], similarity) -> tuple[str, str] | None:
    times = [t for (t,) in job.query(f"""SELECT timestamp FROM logs WHERE entity = $entity
                                          AND left(message, 200) = $line AND {job.in_window()}
                                          ORDER BY timestamp LIMIT {OCCURRENCES}""",
                                     {"entity": entity, "line": line})]
    bad = []
    for u, v in mine:
        slow = g.edges[u, v]["stats"]["p95_base"] or 0.0
        n = 0
        for t in times:
            n += job.query(f"""SELECT count(*) FROM edges WHERE caller = $u AND callee = $v
                               AND start BETWEEN $a AND $b AND ({ERR} OR duration_ms > $slow)""",
                           {"u": u, "v": v, "a": t - dt.timedelta(seconds=DELTA_S),
                            "b": t + dt.timedelta(seconds=DELTA_S), "slow": slow})[0][0]
        bad.append(n)
    total = sum(bad)
    by_time = [b / total if total else 1 / len(mine) for b in bad]
    peers = []
    for u, v in mine:
        peer = v if u == service else u
        ops = job.query("SELECT DISTINCT operation FROM edges WHERE caller = $u AND callee = $v LIMIT 5",
                        {"u": u, "v": v})
        peers.append(" ".join([peer, *(str(o) for (o,) in ops if o)]))
    sims = similarity(line, peers)
    s_total = sum(sims)
    by_meaning = [s / s_total if s_total else 1 / len(mine) for s in sims]
    score = sorted(((t + m) / 2, i) for i, (t, m) in enumerate(zip(by_time, by_meaning)))
    if len(score) == 1 or score[-1][0] - score[-2][0] >= MARGIN:
        return mine[score[-1][1]]
    return None
