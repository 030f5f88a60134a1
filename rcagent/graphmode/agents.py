"""The model's parts in graph mode: health summaries, the diagnoser, the verifier's judgement and the log
arbitrator, each one schema-constrained call.

Every answer is parsed as span mode's agents do (json, then JsonRegen's repair round, no restatement); an
answer that is still unusable is counted, and the part falls back to what the graph shows: the template
report, a diagnosis from the evidence (a node with intrinsic evidence that its dependencies do not outweigh
is a suspect; any other moved node, or one above a strongly moved one, a propagator; the rest healthy),
the graph's checks alone, no arbitration.

A diagnoser's verdict that contradicts the graph is challenged once, as the ReAct mode's handlers answer a
bad action with an error and a hint: "healthy" for a node that moved at least half as much as the most
anomalous entity, or that reaches (calls, directly or not, or runs) one that did (the fault may pass
through it: calling it healthy would prune the way there), and "root_cause" for a node where nothing
moved. The model answers again with the contradiction in front of it; a second contradicting answer is
overruled by the evidence verdict. Both are counted, and a verdict the evidence wrote is never reported
as the model's own pick.
"""
from __future__ import annotations

import json
import threading
import time

import networkx as nx

from rcagent import explain, prompts
from rcagent.errors import TimeLimit
from rcagent.graphmode import verifier
from rcagent.graphmode.anomaly_graph import edge_line, report
from rcagent.graphmode.walk import HEALTHY, PROPAGATOR, ROOT, STATES, Verdict, Verification
from rcagent.serving.counted import CountedModel
from rcagent.stabilizers.jsonregen import agent_object

TEXT = {"type": "string", "maxLength": 200}
CONFIDENCE = {"type": "number", "minimum": 0, "maximum": 1}
HEALTH_SCHEMA = {"type": "object", "properties": {"report": {"type": "string", "maxLength": 300}},
                 "required": ["report"]}
DIAGNOSE_SCHEMA = {"type": "object", "properties": {"state": {"enum": list(STATES)}, "confidence": CONFIDENCE,
                                                    "reason": TEXT}, "required": ["state", "confidence", "reason"]}
VERIFY_SCHEMA = {"type": "object", "properties": {**{c: {"type": "boolean"} for c in verifier.CHECKS},
                                                  "critique": TEXT},
                 "required": [*verifier.CHECKS, "critique"]}
MAX_TOKENS = 200
EVIDENT = 0.5       # health (over the job's highest), of a node or of what it reaches, that "healthy" contradicts


class GraphAgents:
    def __init__(self, job, g: nx.DiGraph, model: CountedModel, deadline: float | None = None,
                 cancel: threading.Event | None = None, summaries: bool = True, challenge: bool = True):
        self.job, self.g, self.model = job, g, model
        self.deadline, self.cancel, self.summaries, self.challenge = deadline, cancel, summaries, challenge
        self.reports: dict[str, tuple[str, str]] = {}   # node -> (report, written by: model or template)
        self.unparsed = 0
        self.challenged = 0         # diagnoser verdicts that contradicted the graph and were asked again
        self.overruled = 0          # ... and contradicted it again: the evidence verdict stands instead

    def ask(self, prompt: str | list[dict], schema: dict) -> dict | None:
        if self.cancel is not None and self.cancel.is_set():
            raise KeyboardInterrupt
        if self.deadline is not None and time.monotonic() > self.deadline:
            raise TimeLimit(f"no verified root cause after {self.model.llm_calls} model calls: the time limit ran out")
        messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else prompt
        data = agent_object(self.model.query(messages, schema, MAX_TOKENS).text, schema["required"])
        if data is None:
            self.unparsed += 1
        return data

    # ---- node health report ------------------------------------------------------------------------
    def report(self, node: str) -> str:
        if node not in self.reports:
            template = report(self.g, node)
            text, by = template, "template"
            h = self.g.nodes[node]["health"]
            if self.summaries and (h.signals or h.logs):
                answer = self.ask(prompts.render("graph_health", evidence=prompts.data(template)), HEALTH_SCHEMA)
                summary = str(answer["report"]) if answer else ""
                if explain.is_sentence(summary, set(self.job.entities)):
                    text, by = f"{summary}\nEvidence:\n{template}", "model"
            self.reports[node] = (text, by)
        return self.reports[node][0]

    def deps(self, node: str) -> str:
        lines = [edge_line(self.g, node, n) for n in sorted(self.g.successors(node),
                                                             key=lambda n: -self.g.edges[node, n]["gradient"])]
        return "\n".join(lines[:8]) or "nothing (a leaf)"

    # ---- diagnoser ---------------------------------------------------------------------------------
    def diagnose(self, node: str, path: list[str], summary: list[str]) -> Verdict:
        prompt = prompts.render("graph_diagnose", alert=self.job.alert[:300], path=" -> ".join(path),
                                summary="; ".join(summary)[:600] or "nothing yet", node=node,
                                kind=self.g.nodes[node]["kind"], report=prompts.data(self.report(node)[:1500]),
                                deps=prompts.data(self.deps(node)))
        answer = self.ask(prompt, DIAGNOSE_SCHEMA)
        verdict = self._verdict(answer)
        why = self.challenge and verdict and self.contradiction(node, verdict)
        if why:
            self.challenged += 1
            again = [{"role": "user", "content": prompt},
                     {"role": "assistant", "content": json.dumps(answer)},
                     {"role": "user", "content": prompts.render("graph_challenge", contradiction=why)}]
            verdict = self._verdict(self.ask(again, DIAGNOSE_SCHEMA))
            if verdict and self.contradiction(node, verdict):
                self.overruled += 1
                overruled = self.from_evidence(node)
                return Verdict(overruled.state, overruled.confidence,
                               f"{overruled.reason} (the model said {verdict.state} twice)", "evidence")
        return verdict or self.from_evidence(node)

    def _verdict(self, answer: dict | None) -> Verdict | None:
        try:
            if answer and answer["state"] in STATES:
                return Verdict(str(answer["state"]), max(0.0, min(1.0, float(answer["confidence"]))),
                               str(answer["reason"] or ""))
        except (TypeError, ValueError):
            self.unparsed += 1
        return None

    def contradiction(self, node: str, verdict: Verdict) -> str | None:
        """What the graph shows against `verdict`, in the words the model reads again; None if nothing."""
        h = self.g.nodes[node]["health"]
        below = self.g.nodes[node].get("below", 0.0)
        if verdict.state == HEALTHY and max(h.health, below) >= EVIDENT:
            where = (f"{node} itself moved (anomaly score {h.score:.0f}, {h.health:.0%} of the highest)"
                     if h.health >= EVIDENT else
                     f"what {node} depends on moved ({below:.0%} of the highest anomaly), so the fault may pass through it")
            return prompts.message("graph_not_healthy", node=node, where=where)
        if verdict.state == ROOT and not h.signals and not h.logs:
            return prompts.message("graph_not_root", node=node)
        return None

    def from_evidence(self, node: str) -> Verdict:
        h = self.g.nodes[node]["health"]
        score, why = verifier.counterfactual(self.g, node)
        if h.intrinsic > 0 and score >= 0.5:
            # P(root): how much of the anomaly is its own, times how anomalous it is against the job's highest
            return Verdict(ROOT, round(score * h.health, 3), f"its own evidence: {why}", "evidence")
        if h.signals or h.logs:
            return Verdict(PROPAGATOR, 0.5, f"it moved, but {why}", "evidence")
        if self.g.nodes[node].get("below", 0.0) >= EVIDENT:
            return Verdict(PROPAGATOR, 0.5, "nothing of its own moved, but what it depends on did", "evidence")
        return Verdict(HEALTHY, 0.5, "nothing moved from its baseline", "evidence")

    # ---- verifier ----------------------------------------------------------------------------------
    def verify(self, node: str, path: list[str], verdict: Verdict, summary: list[str],
               use_model: bool = True) -> Verification:
        checks = verifier.deterministic(self.g, node, path, verdict.reason)
        judged, critique = None, ""
        if use_model:
            prompt = prompts.render("graph_verify", node=node, alert=self.job.alert[:300], hypothesis=verdict.reason,
                                    path=" -> ".join(path), report=prompts.data(self.report(node)[:1200]),
                                    **{k: f"{s:.2f} ({why})" for k, (s, why) in checks.items()})
            answer = self.ask(prompt, VERIFY_SCHEMA)
            if answer and all(isinstance(answer.get(c), bool) for c in verifier.CHECKS):
                judged = {c: answer[c] for c in verifier.CHECKS}
                critique = str(answer.get("critique") or "")
        score, stored, weakest = verifier.combine(checks, judged)
        text = critique if judged and explain.is_sentence(critique, set(self.job.entities)) else weakest
        return Verification(score, stored, text)

    # ---- log arbitration ---------------------------------------------------------------------------
    def arbitrate(self, line: str, service: str, labels: list[str]) -> int | None:
        listed = "\n".join(f"{i + 1}. {label}" for i, label in enumerate(labels))
        schema = {"type": "object", "properties": {"call": {"type": "integer", "minimum": 1,
                                                            "maximum": len(labels)}}, "required": ["call"]}
        answer = self.ask(prompts.render("graph_arbitrate", service=service, line=prompts.data(line[:300]),
                                         calls=prompts.data(listed)), schema)
        try:
            return int(answer["call"]) - 1 if answer else None
        except (TypeError, ValueError):
            return None
