"""Scripted backends for tests: ScriptedBackend replays queued responses in order (like simonw/llm's mock
model); RuleBackend answers each request by a rule, for concurrent callers such as span agents."""
from __future__ import annotations

import json
import time
from pathlib import Path

from rcagent.errors import BackendError, BadInput
from rcagent.serving import Completion, register_backend


class ScriptedBackend:
    name = "scripted"

    def __init__(self, responses: list[str] | None = None, delay: float = 0.0, model: str = "scripted"):
        self.queue = list(responses or [])
        self.delay = delay
        self.model = model
        self.calls: list[dict] = []  # every request, for assertions

    def add(self, *responses: str) -> None:
        self.queue.extend(responses)

    def complete(self, messages, *, schema=None, n=1, temperature=0.0, max_tokens=1024):
        self.calls.append({"messages": messages, "schema": schema, "n": n})
        out = []
        for _ in range(n):
            if not self.queue:
                raise BackendError("scripted backend: no responses left in the queue")
            if self.delay:
                time.sleep(self.delay)
            text = self.queue.pop(0)
            out.append(Completion(text, prompt_tokens=sum(len(m["content"]) for m in messages) // 4,
                                  completion_tokens=len(text) // 4, latency_ms=self.delay * 1000))
        return out


@register_backend("scripted")
def _factory(settings, responses=None, **_):
    if responses is None and settings.script:
        from rcagent.validate import read_text

        text = read_text(Path(settings.script).expanduser(), "script", max_bytes=64_000_000)
        try:
            responses = json.loads(text)
            if not isinstance(responses, list):
                raise BadInput(f"{settings.script}: expected a JSON list of responses")
            responses = [r if isinstance(r, str) else json.dumps(r) for r in responses]
        except ValueError as exc:
            raise BadInput(f"{settings.script}: not a JSON list of responses ({exc})") from None
        except RecursionError:
            raise BadInput(f"{settings.script}: nested too deeply to be a list of responses") from None
    return ScriptedBackend(responses)


class RuleBackend:
    """A deterministic model for concurrent callers (span agents), where a queue's order would be a race:
    `answer(messages, schema) -> dict` decides each reply, sent back as JSON after `delay` seconds."""
    name = "scripted"

    def __init__(self, answer, delay: float = 0.0, model: str = "rules"):
        self.answer, self.delay, self.model = answer, delay, model
        self.calls: list[dict] = []

    def complete(self, messages, *, schema=None, n=1, temperature=0.0, max_tokens=1024):
        self.calls.append({"messages": messages, "schema": schema, "n": n})
        out = []
        for _ in range(n):
            if self.delay:
                time.sleep(self.delay)
            text = json.dumps(self.answer(messages, schema))
            out.append(Completion(text, prompt_tokens=sum(len(m["content"]) for m in messages) // 4,
                                  completion_tokens=len(text) // 4, latency_ms=self.delay * 1000))
        return out
