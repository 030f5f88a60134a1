"""The coordinator's walk (GAMA §4.2, Algorithm 3): from the alert's entity towards the source of the fault.

At each node the diagnoser classifies it (root cause, propagator or healthy, with a confidence). A suspected
root cause (confidence >= tau_conf) goes to the verifier; a verified one ends the walk. A propagator, or a
refuted suspect, hands over to the navigator, which ranks the node's outgoing edges by the fault gradient
(deterministic, from the graph) and moves to the steepest; the other viable edges stay on the hypothesis
stack (LIFO). The alert's own node is never healthy (the alert fired there). A healthy node, or one with nowhere left to go, is a dead end: the walk backtracks to the
last branching point. The coordinator keeps the visited set, the stack and a running summary that every
agent's prompt receives. The diagnoser and verifier are callables, so the walk runs with a scripted model
in tests; the ablations of §6 are flags (no verifier, no backtracking, a random navigator).
"""
from __future__ import annotations

import random
from dataclasses import asdict, dataclass, field
from typing import Callable, Protocol

import networkx as nx

ROOT, PROPAGATOR, HEALTHY = "root_cause", "propagator", "healthy"
STATES = (ROOT, PROPAGATOR, HEALTHY)
SUMMARY_ITEMS = 8      # findings the running summary keeps (the latest)


@dataclass
class Verdict:
    state: str
    confidence: float
    reason: str
    source: str = "model"          # model, or evidence (the model's answer was not usable)


@dataclass
class Verification:
    score: float
    checks: dict                   # name -> {"score", "why", "model"}
    critique: str = ""


@dataclass
class Event:
    step: int
    kind: str                      # visit, verify, move, backtrack, stop
    node: str
    detail: dict = field(default_factory=dict)


@dataclass
class WalkResult:
    root: str | None               # the verified root cause (or accepted, without a verifier)
    path: list[str]                # from the start to the root, or to the last node visited
    claims: list[tuple[str, float, bool]]   # (node, P(root), refuted) of every node the diagnoser called root
    visited: list[str]
    events: list[Event]
    ended: str                     # verified, accepted, exhausted, dead end, step limit

    def to_dict(self) -> dict:
        return {"root": self.root, "path": self.path, "claims": [list(c) for c in self.claims],
                "visited": self.visited, "ended": self.ended, "events": [asdict(e) for e in self.events]}


class Diagnoser(Protocol):
    def __call__(self, node: str, path: list[str], summary: list[str]) -> Verdict: ...


class Verifier(Protocol):
    def __call__(self, node: str, path: list[str], verdict: Verdict, summary: list[str]) -> Verification: ...


def navigate(g: nx.DiGraph, node: str, skip: set[str], how: str = "gradient",
             rng: random.Random | None = None) -> list[tuple[str, float]]:
    """The node's unvisited successors, steepest fault gradient first (only those with a gradient above 0);
    `how="random"`: every unvisited successor, in random order (the ablation)."""
    out = [(n, g.edges[node, n]["gradient"]) for n in g.successors(node) if n not in skip]
    if how == "random":
        (rng or random.Random(0)).shuffle(out)
        return out
    return sorted([(n, s) for n, s in out if s > 0], key=lambda ns: (-ns[1], ns[0]))


def walk(g: nx.DiGraph, start: str, diagnose: Diagnoser, verify: Verifier | None, tau_conf: float,
         tau_verify: float, max_steps: int = 10, backtrack: bool = True, navigator: str = "gradient",
         seed: int = 0, on_event: Callable[[Event], None] | None = None) -> WalkResult:
    """The walk; `verify=None` accepts the diagnoser's suspect (the no-verifier ablation)."""
    events: list[Event] = []
    rng = random.Random(seed)

    def note(kind: str, node: str, **detail) -> None:
        events.append(Event(len(visited), kind, node, detail))
        if on_event:
            on_event(events[-1])

    visited: list[str] = []
    stack: list[tuple[str, list[str]]] = [(start, [start])]   # (node, path from the start), LIFO
    summary: list[str] = []
    claims: dict[str, tuple[float, bool]] = {}
    last: list[str] = [start]
    while stack:
        if len(visited) >= max_steps:
            note("stop", last[-1], why=f"step limit ({max_steps} visits)")
            return _result(None, last, claims, visited, events, "step limit")
        node, path = stack.pop()
        if node in visited:
            continue
        if visited and path[:-1] != last:
            note("backtrack", node, to=node, branch=path[-2] if len(path) > 1 else None)
        visited.append(node)
        last = path
        verdict = diagnose(node, path, summary[-SUMMARY_ITEMS:])
        if verdict.state == HEALTHY and node == start:
            # the alert fired here: the start is at least a propagator, else one answer would end the walk
            verdict = Verdict(PROPAGATOR, verdict.confidence, f"the alert fired here (the diagnoser said healthy: "
                                                              f"{verdict.reason[:80]})", verdict.source)
        note("visit", node, state=verdict.state, confidence=verdict.confidence, reason=verdict.reason,
             source=verdict.source, via=path[-2] if len(path) > 1 else None)
        summary.append(f"{node}: {verdict.state} ({verdict.confidence:.2f}) {verdict.reason[:80]}".strip())
        if verdict.state == ROOT:
            claims[node] = (verdict.confidence, False)
            if verdict.confidence >= tau_conf:
                if verify is None:
                    note("stop", node, why="suspect accepted (no verifier)")
                    return _result(node, path, claims, visited, events, "accepted")
                v = verify(node, path, verdict, summary[-SUMMARY_ITEMS:])
                passed = v.score >= tau_verify
                note("verify", node, score=round(v.score, 3), passed=passed, checks=v.checks, critique=v.critique)
                if passed:
                    note("stop", node, why="verified")
                    return _result(node, path, claims, visited, events, "verified")
                claims[node] = (verdict.confidence, True)
                summary.append(f"{node} refuted: {v.critique[:100]}")
        options = [] if verdict.state == HEALTHY else navigate(g, node, set(visited), navigator, rng)
        if not options:
            if not backtrack or not stack:
                note("stop", node, why="dead end" + ("" if stack else ", nothing left to try"))
                return _result(None, path, claims, visited, events, "dead end" if not backtrack else "exhausted")
            continue
        if backtrack:
            stack.extend((n, path + [n]) for n, _ in reversed(options))
        else:
            stack = [(options[0][0], path + [options[0][0]])]
        note("move", options[0][0], src=node, gradient=options[0][1],
             alternatives=[n for n, _ in options[1:4]])
    note("stop", last[-1], why="nothing left to try")
    return _result(None, last, claims, visited, events, "exhausted")


def _result(root, path, claims, visited, events, ended) -> WalkResult:
    ordered = sorted(((n, p, r) for n, (p, r) in claims.items()), key=lambda c: (c[2], -c[1], c[0]))
    return WalkResult(root, list(path), ordered, list(visited), events, ended)
