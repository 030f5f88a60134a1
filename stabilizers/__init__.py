"""Stabilizers: turn a model output into a valid action, or answer the controller with an error and a hint.

This module holds the plain parser every run uses: strict JSON, the action's shape, a known tool.
JsonRegen and the error handlers plug in here as further parsers and checks (see Controller).
"""
from __future__ import annotations

import json

from rcagent.actions import Action
from rcagent.errors import FormatError

BUILTIN_ACTIONS = ("read_snapshot", "finalize")


def parse_action(text: str, tool_names: list[str]) -> Action:
    """A strict parse: exactly one JSON object with thought, action and arguments."""
    try:
        # strict=False: a raw newline or tab inside a string is harmless (a grammar lets models emit them)
        data = json.loads(text, strict=False)
    except json.JSONDecodeError as exc:
        raise FormatError(f"your answer is not valid JSON ({exc.msg} at character {exc.pos}).") from None
    if not isinstance(data, dict):
        raise FormatError("your answer must be one JSON object with thought, action and arguments.")
    name = data.get("action")
    known = list(tool_names) + list(BUILTIN_ACTIONS)
    if not isinstance(name, str) or name not in known:
        raise FormatError(f"unknown action {name!r}; choose one of: {', '.join(known)}.")
    args = data.get("arguments") or {}
    if not isinstance(args, dict):
        raise FormatError("'arguments' must be a JSON object.")
    return Action(str(data.get("thought") or ""), name, args)
