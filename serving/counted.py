"""A run's model: every call counted (calls, prompt and completion tokens); greedy calls cached by the full
request in the store, so a run replays; sampled calls (self-consistency) never cached."""
from __future__ import annotations

from rcagent.serving import Backend, Completion, cached_complete, neutral_messages
from rcagent.validate import clean_answer


class CountedModel:
    def __init__(self, backend: Backend, store, settings):
        self.backend, self.store, self.settings = backend, store, settings
        self.llm_calls = self.prompt_tokens = self.completion_tokens = 0

    def query(self, messages: list[dict], schema: dict | None, max_tokens: int | None = None) -> Completion:
        c = cached_complete(self.backend, self.store, self.settings, messages, schema, max_tokens)
        self.count([c])
        return c

    def sample(self, messages: list[dict], schema: dict | None, n: int) -> list[Completion]:
        """n completions at the sampling temperature; the backend reuses the prompt's cached prefix."""
        out = self.backend.complete(neutral_messages(messages), schema=schema, n=n,
                                    temperature=self.settings.sample_temperature, max_tokens=self.settings.max_tokens)
        for c in out:
            c.text = clean_answer(c.text)
        self.count(out)
        return out

    def fill(self, d, wall_s: float) -> None:
        """Put this run's model figures, its wall time and the backend into the Diagnosis `d`."""
        d.llm_calls, d.prompt_tokens, d.completion_tokens = self.llm_calls, self.prompt_tokens, self.completion_tokens
        d.wall_s, d.backend, d.model = round(wall_s, 3), self.backend.name, self.backend.model

    def count(self, completions: list[Completion]) -> None:
        self.llm_calls += len(completions)
        self.prompt_tokens += sum(c.prompt_tokens for c in completions)
        self.completion_tokens += sum(c.completion_tokens for c in completions)
