"""Exceptions that carry a message for the user (CLI) or for the model (controller)."""
from __future__ import annotations


def one_line(text: str, limit: int = 400) -> str:
    """A message on one line: newlines and control characters of hostile input are escaped, not printed."""
    text = " ".join(str(text).split("\n")).strip()
    text = "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
    return text if len(text) <= limit else text[: limit - 3] + "..."


class BadInput(Exception):
    """Bad input from the user: the CLI prints the message on one line and exits with 2."""


class UnknownEntity(BadInput):
    def __init__(self, name: str, suggestions: list[str]):
        self.name, self.suggestions = name, suggestions
        hint = f"; did you mean {', '.join(suggestions)}?" if suggestions else ""
        super().__init__(f"unknown entity '{name}'{hint}")


class AgentMessage(Exception):
    """Control flow inside the agent loop: the message is appended to the conversation."""


class FormatError(AgentMessage):
    """The model's output was not a valid action; `rounds` records the repair attempts (JsonRegen)."""

    def __init__(self, message: str, rounds: list[dict] | None = None):
        super().__init__(message)
        self.rounds = rounds or []


class ToolError(AgentMessage):
    """A tool refused its arguments (unknown entity, bad parameter)."""


class Handled(AgentMessage):
    """An error handler rejected a well-formed action: what is wrong, and what to do instead."""

    def __init__(self, handler: str, error: str, hint: str):
        from rcagent.prompts import message

        super().__init__(message("refusal", error=error, hint=hint))
        self.handler, self.error, self.hint = handler, error, hint


class BackendError(Exception):
    """A model backend failed (server down, model missing)."""


class TimeLimit(Exception):
    """A run went past its time limit (batch --timeout): the job is recorded as unanswered."""
