"""The action format: one JSON object {thought, action, arguments}, and its JSON schema.

The schema enumerates the tool names and, for entity parameters and finalize's root causes, the job's
inventory, so that a constrained model cannot invent either.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from rcagent.tools import Tool

# Bounds keep every action short enough to finish within the token budget (max_tokens), even when a
# small model fills a string with repetition: the longest finalize is about 1,300 characters.
THOUGHT_MAX = 160
TEXT_MAX = 200


@dataclass
class Action:
    thought: str
    name: str
    arguments: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {"thought": self.thought, "action": self.name, "arguments": self.arguments}


@dataclass
class SchemaLimits:
    """What the error handlers would reject, expressed in the schema (see stabilizers.handlers.limits)."""
    spent: dict[str, set[str]] = field(default_factory=dict)  # tool -> entities called ("" = no entity);
                                                              # read_snapshot -> keys read to the end
    allow_finalize: bool = True
    finalize_entities: list[str] | None = None                # None: the whole inventory
    evidence_min: int = 0
    snapshot_pages: bool = True                               # False: read_snapshot shows the next unread page


def _param_schema(p, entities: list[str]) -> dict:
    if p.entity and entities:
        return {"type": "string", "enum": entities}
    if p.choices:
        return {"type": "string", "enum": list(p.choices)}
    return {"type": p.type, "maxLength": 60} if p.type == "string" else {"type": p.type}


def _branch(name: str, properties: dict, required: list[str]) -> dict:
    return {"type": "object", "properties": {
        "thought": {"type": "string", "maxLength": THOUGHT_MAX},
        "action": {"type": "string", "enum": [name]},
        "arguments": {"type": "object", "properties": properties, "required": required,
                      "additionalProperties": False}},
        "required": ["thought", "action", "arguments"], "additionalProperties": False}


FINALIZE_ARGS = ("root_causes", "root_cause", "solution", "evidence", "responsibility")


def finalize_schema(entities: list[str], evidence_min: int = 0) -> dict:
    item = {"type": "string", "enum": entities} if entities else {"type": "string"}
    quote = {"type": "string", "maxLength": 120, **({"minLength": evidence_min} if evidence_min else {})}
    return {
        "root_causes": {"type": "array", "items": item, "minItems": 1, "maxItems": 3},
        "root_cause": {"type": "string", "maxLength": TEXT_MAX},
        "solution": {"type": "string", "maxLength": TEXT_MAX},
        "evidence": {"type": "array", "items": quote, "minItems": 1, "maxItems": 3},
        "responsibility": {"type": "string", "maxLength": 60},
    }


def action_schema(tools: dict[str, Tool], entities: list[str], allow_tools: bool = True,
                  snapshot_keys: list[str] | None = None, limits: SchemaLimits | None = None) -> dict:
    """anyOf one branch per tool, read_snapshot (once the run has snapshots: their keys enumerated) and
    finalize; only finalize when allow_tools is False. `limits` drops what the error handlers would reject."""
    limits = limits or SchemaLimits()
    branches = []
    if allow_tools:
        for tool in tools.values():
            spent = limits.spent.get(tool.name, set())
            if tool.entity_param is None and spent:
                continue
            left = [e for e in entities if e not in spent]
            if tool.entity_param is not None and not left:
                continue
            props = {p.name: _param_schema(p, left) for p in tool.params}
            branches.append(_branch(tool.name, props, [p.name for p in tool.params if p.required]))
        keys = [k for k in snapshot_keys or [] if k not in limits.spent.get("read_snapshot", set())]
        if keys:
            page = {"page": {"type": "integer", "minimum": 1, "maximum": 99}} if limits.snapshot_pages else {}
            branches.append(_branch("read_snapshot", {"key": {"type": "string", "enum": keys}, **page}, ["key"]))
    if limits.allow_finalize or not branches:
        fin = finalize_schema(limits.finalize_entities or entities, limits.evidence_min)
        branches.append(_branch("finalize", fin, list(fin)))
    return {"anyOf": branches} if len(branches) > 1 else branches[0]
