"""The Dedicated Agent of one span (RCLAgent §IV-B1): self-state verification, then evidence consolidation.

Self-state: the span's metric and log tools run (each answer cut to `span_obs_chars`), then one model
call under a schema returns {abnormal, key_symptoms, hypothesis}; span_id and service come from the
trace, not from the model. Consolidation (not for leaves: a leaf is its own conclusion): one model call
over the span's self-state and its children's conclusions, the choice constrained to the children's
labels, "self" or "defer", returns {root_cause, reason, confidence}. The agent's context is only its
span's data and its children's one-line conclusions: every prompt is checked against `MAX_PROMPT_CHARS`.
Output that does not parse is repaired by JsonRegen's repair round (json-repair, then YAML; no restatement
by the model, which would cost a call per agent); an agent whose output still does not parse falls back to
what its tools showed, and is counted.
"""
from __future__ import annotations

import threading
import time

from rcagent import prompts
from rcagent.errors import TimeLimit
from rcagent.serving import cached_complete
from rcagent.spans.tools import span_logs, span_metrics
from rcagent.stabilizers.jsonregen import agent_object

MAX_PROMPT_CHARS = 4000     # per agent call: the span's data and its children's conclusions, never more
CHILD_CHARS = 220           # one child's conclusion as its parent sees it
TEXT = {"type": "string", "maxLength": 200}
SELF_SCHEMA = {"type": "object", "properties": {"abnormal": {"type": "boolean"}, "key_symptoms": TEXT,
                                                "hypothesis": TEXT},
               "required": ["abnormal", "key_symptoms", "hypothesis"]}


def consolidate_schema(choices: list[str]) -> dict:
    return {"type": "object", "properties": {"root_cause": {"enum": choices}, "reason": TEXT,
                                             "confidence": {"type": "number", "minimum": 0, "maximum": 1}},
            "required": ["root_cause", "reason", "confidence"]}


class SpanAgents:
    """Builds and runs the agents of one request's tree; safe to call from the pool's threads."""

    def __init__(self, job, backend, store, settings, run_id: str, trace_id: str, labels: dict, usual_ms: float,
                 deadline: float | None = None, cancel: threading.Event | None = None):
        self.job, self.backend, self.store, self.settings = job, backend, store, settings
        self.run_id, self.trace_id, self.labels, self.usual_ms = run_id, trace_id, labels, usual_ms
        self.deadline, self.cancel = deadline, cancel
        self.lock = threading.Lock()
        # llama.cpp in process is not thread-safe: its calls take turns; a server takes them in parallel
        self.model_lock = threading.Lock() if backend.name in ("local", "transformers") else None
        self.llm_calls = self.prompt_tokens = self.completion_tokens = self.unparsed = 0
        self.max_prompt_chars = 0

    # ---- model calls ------------------------------------------------------------------------------
    def check_time(self) -> None:
        """Before every model call, as the controller does between steps: past the deadline the run ends
        with TimeLimit, a set cancel event ends it as interrupted; calls in flight finish first."""
        if self.cancel is not None and self.cancel.is_set():
            raise KeyboardInterrupt
        if self.deadline is not None and time.monotonic() > self.deadline:
            with self.lock:
                calls = self.llm_calls
            raise TimeLimit(f"no answer after {calls} span-agent calls: the time limit ran out")

    def ask(self, prompt: str, schema: dict) -> dict | None:
        self.check_time()
        if len(prompt) > MAX_PROMPT_CHARS:
            raise AssertionError(f"span agent prompt of {len(prompt)} characters exceeds {MAX_PROMPT_CHARS}")
        messages = [{"role": "user", "content": prompt}]
        if self.model_lock:
            with self.model_lock:
                c = cached_complete(self.backend, self.store, self.settings, messages, schema, 300)
        else:
            c = cached_complete(self.backend, self.store, self.settings, messages, schema, 300)
        with self.lock:
            self.llm_calls += 1
            self.prompt_tokens += c.prompt_tokens
            self.completion_tokens += c.completion_tokens
            self.max_prompt_chars = max(self.max_prompt_chars, len(prompt))
        data = agent_object(c.text, schema["required"])
        if data is None:
            with self.lock:
                self.unparsed += 1
        return data

    # ---- the two phases -----------------------------------------------------------------------------
    def self_state(self, span) -> dict:
        start = time.perf_counter()
        metrics = span_metrics(self.job, span, self.settings.span_delta_s, self.settings.span_sigma,
                               self.settings.span_obs_chars)
        logs = span_logs(self.job, span, self.trace_id, self.settings.span_delta_s, self.settings.span_obs_chars)
        prompt = prompts.render("span_self", label=self.labels[span.span_id], service=span.service,
                                entity=span.entity, duration=f"{span.duration_ms:.0f} ms",
                                usual=f"{self.usual_ms:.0f} ms", metrics=prompts.data(metrics),
                                logs=prompts.data(logs))
        answer = self.ask(prompt, SELF_SCHEMA)
        tool_abnormal = not metrics.startswith("no ") or not logs.startswith("no ")
        state = {"span_id": span.span_id, "label": self.labels[span.span_id], "service": span.service,
                 "entity": span.entity, "operation": span.operation, "duration_ms": round(span.duration_ms, 1),
                 "folded": span.folded,
                 "abnormal": bool(answer["abnormal"]) if answer else tool_abnormal,
                 "key_symptoms": str(answer["key_symptoms"]) if answer else _first_line(metrics, logs),
                 "hypothesis": str(answer["hypothesis"]) if answer else "",
                 "from": "model" if answer else "tools (the model's answer did not parse)",
                 "metrics": metrics, "logs": logs}
        self.store.add_span_agent(self.run_id, span.span_id, phase="self_state", output=state,
                                  ms=(time.perf_counter() - start) * 1000)
        return state

    def consolidate(self, span, state: dict, children: list[dict]) -> dict:
        start = time.perf_counter()
        own = {"span_id": span.span_id, "label": state["label"], "service": span.service, "entity": span.entity}
        if not children:                    # a leaf's conclusion is its self-state
            out = {**own, "root_cause": "self" if state["abnormal"] else "defer", "reason": state["hypothesis"],
                   "confidence": None, "points_to": span.span_id if state["abnormal"] else None}
        else:
            choices = [c["label"] for c in children] + ["self", "defer"]
            listed = "\n".join(_child_line(c) for c in children)
            prompt = prompts.render("span_consolidate", label=state["label"], service=span.service,
                                    abnormal=str(state["abnormal"]).lower(), symptoms=state["key_symptoms"],
                                    hypothesis=state["hypothesis"], children=prompts.data(listed),
                                    choices=", ".join(choices[:-2]))
            answer = self.ask(prompt, consolidate_schema(choices))
            choice = str(answer["root_cause"]) if answer and answer["root_cause"] in choices else None
            if choice is None:              # no usable answer: the most confident abnormal report wins
                choice = _fallback_choice(state, children)
            by_label = {c["label"]: c for c in children}
            if choice in by_label:          # follow the child's own conclusion down, else stop at the child
                points_to = by_label[choice]["points_to"] or by_label[choice]["span_id"]
            else:
                points_to = span.span_id if choice == "self" else None
            out = {**own, "root_cause": choice, "reason": str(answer["reason"]) if answer else "",
                   "confidence": _confidence(answer), "points_to": points_to}
        self.store.add_span_agent(self.run_id, span.span_id, phase="consolidate", output=out,
                                  ms=(time.perf_counter() - start) * 1000)
        return out


def _child_line(c: dict) -> str:
    conf = "" if c["confidence"] is None else f", confidence {c['confidence']:.1f}"
    return f"- {c['label']} ({c['service']}): root cause {c['root_cause']}{conf}; {c['reason']}"[:CHILD_CHARS]


def _fallback_choice(state: dict, children: list[dict]) -> str:
    pointing = [c for c in children if c["root_cause"] != "defer"]
    if pointing:
        return max(pointing, key=lambda c: c["confidence"] or 0.5)["label"]
    return "self" if state["abnormal"] else "defer"


def _confidence(answer: dict | None) -> float | None:
    try:
        return max(0.0, min(1.0, float(answer["confidence"]))) if answer else None
    except (TypeError, ValueError):
        return None


def _first_line(*texts: str) -> str:
    return next((t.splitlines()[1][:200] for t in texts if not t.startswith("no ") and len(t.splitlines()) > 1), "")
