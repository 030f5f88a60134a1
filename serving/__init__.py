"""Model backends behind one protocol: local (llama.cpp in process), openai (vLLM or any
OpenAI-compatible server on loopback), transformers (a local Hugging Face folder), scripted (tests).

Backends are registered by name; `make_backend(settings)` builds the one the settings name.
"""
from __future__ import annotations

import json

from dataclasses import dataclass
from typing import Callable, Protocol

from rcagent.errors import BadInput
from rcagent.validate import clean_answer


# llama.cpp's OpenMP threads busy-wait by default; on a loaded 2-core machine that halves its speed
# (docs/benchmarks.md). Passive waiting is set for the in-process model and the servers rcagent starts,
# unless the user chose a policy. It must be in the environment before llama.cpp's library loads.
OMP_DEFAULTS = {"OMP_WAIT_POLICY": "PASSIVE"}


def llama_environment(env: dict | None = None) -> dict:
    """`env` (default: this process's environment) with the OpenMP defaults added where not set."""
    import os

    env = os.environ if env is None else env
    for key, value in OMP_DEFAULTS.items():
        env.setdefault(key, value)
    return env


@dataclass
class Completion:
    text: str
    prompt_tokens: int = 0
    completion_tokens: int = 0
    latency_ms: float = 0.0
    cached: bool = False


class Backend(Protocol):
    name: str
    model: str

    def complete(self, messages: list[dict], *, schema: dict | None = None, n: int = 1,
                 temperature: float = 0.0, max_tokens: int = 1024) -> list[Completion]:
        """n completions of a chat; output constrained to the JSON schema where the backend can."""
        ...


def neutral_messages(messages: list[dict]) -> list[dict]:
    """The messages with chat-template tokens and control characters in their text broken up
    (prompts.neutral): a hostile name or log line cannot open a new turn in the model's template."""
    from rcagent.prompts import neutral

    return [{**m, "content": neutral(m["content"])} for m in messages]


def cached_complete(backend: Backend, store, settings, messages: list[dict], schema: dict | None,
                    max_tokens: int | None = None) -> Completion:
    """One completion at the settings' temperature; a greedy call is replayed from the store's cache when
    the identical request was made before (so a run replays), and cached when it was not."""
    max_tokens = max_tokens or settings.max_tokens
    messages = neutral_messages(messages)
    request = {"backend": backend.name, "model": backend.model, "messages": messages, "schema": schema,
               "temperature": settings.temperature, "max_tokens": max_tokens, "seed": settings.seed}
    cached = store.cached(request) if settings.temperature == 0 and settings.cache else None
    if cached:
        return Completion(**{**cached[0], "cached": True})
    c = backend.complete(messages, schema=schema, n=1, temperature=settings.temperature, max_tokens=max_tokens)[0]
    c.text = clean_answer(c.text)   # bounded, no lone surrogates: safe to parse and to store
    store.cache(request, [{"text": c.text, "prompt_tokens": c.prompt_tokens, "completion_tokens": c.completion_tokens,
                           "latency_ms": c.latency_ms}])
    return c


REPEAT_PROBE = 64   # characters: output whose last 64 characters already occurred in it is looping


def json_object_done(text: str) -> bool:
    """True once text starts with a complete JSON object (what follows it does not matter)."""
    try:
        return isinstance(json.JSONDecoder().raw_decode(text)[0], dict)
    except ValueError:
        return False


def stop_early(text: str) -> bool:
    """When unconstrained generation may stop: an answer that opens with a JSON object ends when the object
    closes (what follows it is never part of the action), and an answer that repeats itself is degenerate."""
    body = text.lstrip().removeprefix("```json").removeprefix("```").lstrip()
    if body.startswith("{") and json_object_done(body):
        return True
    probe = text[-REPEAT_PROBE:]
    return len(text) >= 3 * REPEAT_PROBE and text.find(probe) < len(text) - REPEAT_PROBE


BACKENDS: dict[str, Callable] = {}


def register_backend(name: str):
    def wrap(factory):
        BACKENDS[name] = factory
        return factory
    return wrap


def make_backend(settings, **kwargs) -> Backend:
    # Importing the modules registers them; heavy imports happen inside each backend.
    from rcagent.serving import local, openai, transformers, scripted  # noqa: F401
    if settings.backend not in BACKENDS:
        raise BadInput(f"unknown backend '{settings.backend}' (choose from {', '.join(sorted(BACKENDS))})")
    return BACKENDS[settings.backend](settings, **kwargs)
