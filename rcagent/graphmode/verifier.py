"""The verifier (GAMA §4.2): tries to refute "node v is the root cause" from three angles.

Each check is first computed from the graph (a score in 0..1 and why), then the model judges the same
question with the check's result in front of it; a check's score is the mean of the two (the graph's alone
when the model's answer is not usable), and Vscore is the mean over the checks.
- consistency: the golden signals the hypothesis claims (CPU, memory, latency, errors, traffic, a change)
  moved on v; a hypothesis about a signal that is flat fails, and so does a node where nothing moved;
- causal sufficiency: every step of the walk's path from the alert to v shows the fault passing (an edge
  with a gradient above 0), so v's fault explains what the alert saw;
- counterfactual: if v were healthy, would the symptoms remain? They would if what v depends on (its
  callees, or a pod's node) shows more intrinsic evidence of its own than v does: v's own evidence over the sum.
"""
from __future__ import annotations

import re

import networkx as nx

from rcagent.graphmode.anomaly_graph import Health

CHECKS = ("consistency", "sufficiency", "counterfactual")
# the words of a hypothesis naming a golden signal, and the signals of the graph that support it
_CLAIMS = {"cpu": (re.compile(r"(?i)\bcpu|processor"), re.compile(r"(?i)cpu")),
           "memory": (re.compile(r"(?i)\bmem|memory|oom|heap"), re.compile(r"(?i)mem|oom")),
           "disk": (re.compile(r"(?i)\bdisk|i/o|\bio\b|filesystem"), re.compile(r"(?i)disk|fs_|io|file")),
           "network": (re.compile(r"(?i)network|packet|bandwidth"), re.compile(r"(?i)net|receive|transmit|gap|packet")),
           "latency": (re.compile(r"(?i)latency|slow|delay|timeout"), re.compile(r"(?i)latency|duration|p9|own time|gap")),
           "errors": (re.compile(r"(?i)error|exception|fail"), re.compile(r"(?i)error|fail|exception|success")),
           "change": (re.compile(r"(?i)deploy|rollout|release|config|upgrade"), re.compile(r"(?i)deploy|rollout|release|config|degraded"))}


def consistency(g: nx.DiGraph, node: str, hypothesis: str) -> tuple[float, str]:
    h: Health = g.nodes[node]["health"]
    if not h.signals and not h.logs:
        return 0.0, f"no golden signal of {node} moved from its baseline"
    claimed = [k for k, (says, _) in _CLAIMS.items() if says.search(hypothesis or "")]
    if not claimed:
        return 1.0, f"{node} moved ({h.signals[0].reason if h.signals else 'error logs'}); the hypothesis names no signal"
    text = " ".join(s.reason for s in h.signals) + " " + " ".join(line for line, _, _ in h.logs)
    held = [k for k in claimed if _CLAIMS[k][1].search(text)]
    missing = [k for k in claimed if k not in held]
    why = (f"claims {', '.join(claimed)}; " + (f"{', '.join(held)} moved" if held else "none of it moved")
           + (f"; {', '.join(missing)} flat" if missing and held else ""))
    return len(held) / len(claimed), why


def sufficiency(g: nx.DiGraph, path: list[str]) -> tuple[float, str]:
    steps = list(zip(path, path[1:]))
    if not steps:
        return 1.0, "the alert's own entity: no propagation to explain"
    passing = [(u, v) for u, v in steps if g.edges[u, v]["gradient"] > 0]
    cold = [f"{u}->{v}" for u, v in steps if (u, v) not in passing]
    return len(passing) / len(steps), (f"{len(passing)} of {len(steps)} steps from the alert show the fault passing"
                                       + (f"; no sign of it on {', '.join(cold[:3])}" if cold else ""))


def counterfactual(g: nx.DiGraph, node: str) -> tuple[float, str]:
    own = g.nodes[node]["health"].intrinsic
    # a service's pods are the service itself (it inherits their signals): only calls and placement count
    deps = [(g.nodes[n]["health"].intrinsic, n) for n in g.successors(node) if g.edges[node, n]["kind"] != "runs"]
    worse = max(deps, default=(0.0, None))
    if own == 0 and worse[0] == 0:
        return 0.0, f"{node} shows no evidence of its own"
    score = own / (own + worse[0])
    if worse[1] is None or worse[0] == 0:
        return score, f"nothing {node} depends on moved: its symptoms would go with it"
    return score, (f"{worse[1]}, which {node} depends on, shows {worse[0]:.0f} of its own evidence against "
                   f"{node}'s {own:.0f}" + ("; the symptoms could remain without it" if worse[0] > own else ""))


def deterministic(g: nx.DiGraph, node: str, path: list[str], hypothesis: str) -> dict[str, tuple[float, str]]:
    return {"consistency": consistency(g, node, hypothesis), "sufficiency": sufficiency(g, path),
            "counterfactual": counterfactual(g, node)}


def combine(checks: dict[str, tuple[float, str]], model: dict[str, bool] | None) -> tuple[float, dict, str]:
    """(Vscore, the checks as stored, the critique of the weakest check)."""
    out = {}
    for name, (score, why) in checks.items():
        judged = None if model is None else model.get(name)
        final = score if judged is None else (score + float(judged)) / 2
        out[name] = {"score": round(final, 3), "graph": round(score, 3), "model": judged, "why": why}
    vscore = sum(c["score"] for c in out.values()) / len(out)
    weakest = min(out, key=lambda k: (out[k]["score"], k))
    return vscore, out, f"{weakest}: {out[weakest]['why']}"
