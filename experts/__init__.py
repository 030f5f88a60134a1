"""Expert agents (the log expert and the code expert): LLM sub-agents registered as tools, each citing evidence.

An expert tool gets an ExpertContext from the controller: `ask` sends its own prompts to the run's model
(counted, cached and logged like the controller's calls) and `report` records figures on the step, such
as how many findings were discarded because their evidence matched no real log line.
"""
from __future__ import annotations

from typing import Protocol


class ExpertContext(Protocol):
    def ask(self, messages: list[dict], schema: dict | None = None, max_tokens: int = 400) -> str:
        ...

    def report(self, **figures) -> None:
        ...


class ExpertCalls:
    """The ExpertContext of a run: `model` (serving.counted.CountedModel) answers, `figures` collects what
    the expert reports for the step's record."""

    def __init__(self, model, figures: dict):
        self.model, self.figures = model, figures

    def ask(self, messages: list[dict], schema: dict | None = None, max_tokens: int = 400) -> str:
        return self.model.query(messages, schema, max_tokens).text

    def report(self, **figures) -> None:
        self.figures.update(figures)


def expert_tools() -> dict:
    """The expert agents, registered as tools (rcagent.tools.Tool) beside the information tools."""
    from rcagent.experts import codeexpert, logexpert  # noqa: F401  (importing registers them)
    from rcagent.tools import REGISTRY

    return {name: tool for name, tool in REGISTRY.items() if tool.expert}
