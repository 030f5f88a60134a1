"""JsonRegen: repair a model output into an action in bounded rounds, each round recorded.

Round 1 parses strictly. Round 2 strips what breaks JSON (code fences, prose around the object, control
and typographic characters), repairs the rest with json-repair (or reads output that is already YAML-ish)
and maps common key aliases. Further rounds (at most `yaml_rounds`) ask the model to restate its own
answer as YAML, which small models write more reliably than JSON, parse it with yaml.safe_load and
convert it back: structure and content are kept.
Every round must produce the action's shape (checked with jsonschema); whether the tool, its arguments and
entities make sense is the error handlers' job.
"""
from __future__ import annotations

import json
import re
from typing import Callable

import jsonschema
import yaml
from json_repair import repair_json

from rcagent.actions import Action
from rcagent.errors import FormatError
from rcagent.prompts import message
from rcagent.validate import MAX_DEPTH, NoAliasLoader, clean_answer, depth, unsurrogate

# The shape every round must reach: a thought, an action name, an arguments object.
SHAPE = {
    "type": "object",
    "properties": {"thought": {"type": "string"}, "action": {"type": "string", "minLength": 1},
                   "arguments": {"type": "object"}},
    "required": ["action", "arguments"],
}
ALIASES = {"action": ("tool", "name", "function", "action_name"),
           "arguments": ("args", "parameters", "params", "action_input", "input")}
TYPOGRAPHIC = str.maketrans({"“": '"', "”": '"', "„": '"', "‘": "'", "’": "'", "\u00a0": " "})
CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
FENCE = re.compile(r"```[a-zA-Z]*\n?|```")
ROUND_TEXT_MAX = 500   # how much of a regenerated answer is kept on the step


def shape(data, aliases: bool = True) -> dict:
    """The action dict, or FormatError saying what is missing."""
    if isinstance(data, list):
        data = next((d for d in data if isinstance(d, dict)), None)
    if not isinstance(data, dict):
        raise FormatError(message("not_an_action"))
    if depth(data) > MAX_DEPTH:
        raise FormatError(message("arguments_too_deep"))
    data = normalize(data) if aliases else {**data, "thought": str(data.get("thought") or "")}
    try:
        jsonschema.validate(data, SHAPE)
    except jsonschema.ValidationError as exc:
        where = "/".join(map(str, exc.absolute_path)) or "the answer"
        raise FormatError(message("action_shape", where=where, problem=exc.message)) from None
    return data


def normalize(data: dict) -> dict:
    """Map key aliases (tool → action, args → arguments) and lift stray top-level arguments."""
    data = dict(data)
    for key, aliases in ALIASES.items():
        if key not in data:
            alias = next((a for a in aliases if a in data), None)
            if alias is not None:
                data[key] = data.pop(alias)
    if data.get("arguments") is None and "action" in data:
        data["arguments"] = {k: data.pop(k) for k in list(data) if k not in ("thought", "action")}
    if isinstance(data.get("thought"), (int, float)) or data.get("thought") is None:
        data["thought"] = str(data.get("thought") or "")
    return data


def to_action(data: dict) -> Action:
    # a JSON round trip turns what YAML may produce (dates, sets of keys) into plain JSON values
    arguments = unsurrogate(json.loads(json.dumps(data["arguments"], default=str)))
    return Action(unsurrogate(str(data.get("thought") or "")), unsurrogate(str(data["action"]).strip()), arguments)


def strict(text: str) -> tuple[Action, list[dict]]:
    """Round 1 only: exactly one JSON object (raw newlines inside strings are accepted)."""
    text = clean_answer(text)
    try:
        data = json.loads(text, strict=False)
    except json.JSONDecodeError as exc:
        error = message("not_json", problem=exc.msg, position=exc.pos)
        raise FormatError(error, [{"round": 1, "method": "strict", "ok": False, "error": error}]) from None
    except RecursionError:
        error = message("too_deep")
        raise FormatError(error, [{"round": 1, "method": "strict", "ok": False, "error": error}]) from None
    try:
        action = to_action(shape(data, aliases=False))
    except FormatError as exc:
        raise FormatError(str(exc), [{"round": 1, "method": "strict", "ok": False, "error": str(exc)}]) from None
    return action, [{"round": 1, "method": "strict", "ok": True}]


def clean(text: str) -> str:
    """Strip what breaks JSON: fences, control and typographic characters, prose before the object."""
    text = CONTROL.sub("", FENCE.sub("", text.translate(TYPOGRAPHIC))).strip()
    start = text.find("{")
    return text[start:] if start > 0 else text


class JsonRegen:
    """Callable parser: text -> (Action, rounds).

    `regenerate(text, error)` asks the model to restate `text` as YAML; each YAML round passes the previous
    round's error, so a greedy model is not asked the identical question twice.
    """

    def __init__(self, regenerate: Callable[[str, str], str] | None = None, yaml_rounds: int = 1):
        self.regenerate = regenerate
        self.yaml_rounds = yaml_rounds if regenerate else 0

    def __call__(self, text: str) -> tuple[Action, list[dict]]:
        try:
            return strict(text)
        except FormatError as exc:
            rounds, first_error = exc.rounds, str(exc)
        error = first_error
        for method in ["repair"] + ["yaml"] * self.yaml_rounds:
            record, produced = {"round": len(rounds) + 1, "method": method}, {}
            try:
                if method == "repair":
                    data = repaired(text)
                else:
                    answer = self.regenerate(text, error)
                    produced = {"text": answer[:ROUND_TEXT_MAX]}
                    data = read_yaml(answer)
                action = to_action(shape(data))
            except FormatError as err:
                error = str(err)
                rounds.append({**record, "ok": False, "error": error, **produced})
                continue
            rounds.append({**record, "ok": True, **produced})
            return action, rounds
        raise FormatError(first_error, rounds)


def repaired(text: str):
    """json-repair on the cleaned text; output that already is YAML-ish (key: value lines) is read as YAML."""
    cleaned = clean(clean_answer(text))
    try:
        data = repair_json(cleaned, return_objects=True) if cleaned else ""
    except RecursionError:
        raise FormatError(message("too_deep")) from None
    if not isinstance(data, (dict, list)) or not data:
        try:
            data = read_yaml(text)
        except FormatError:
            pass
    return data


def agent_object(text: str, required: list[str]) -> dict | None:
    """A sub-agent's answer (span and graph mode): strict JSON, else json-repair's reading; None unless it is
    an object with every required key (the caller counts it and falls back to the evidence)."""
    try:
        data = json.loads(text, strict=False)
    except (ValueError, RecursionError):
        try:
            data = repaired(text)
        except FormatError:
            data = None
    data = unsurrogate(data)
    return data if isinstance(data, dict) and all(k in data for k in required) else None


def read_yaml(answer: str):
    body = FENCE.sub("", CONTROL.sub("", clean_answer(answer).translate(TYPOGRAPHIC))).strip()
    try:
        return yaml.load(body, Loader=NoAliasLoader)  # noqa: S506 - a SafeLoader without aliases
    except yaml.YAMLError as exc:
        raise FormatError(message("yaml_unparsed", problem=(str(exc).strip() or "error").splitlines()[0])) from None
    except RecursionError:
        raise FormatError(message("yaml_too_deep")) from None
