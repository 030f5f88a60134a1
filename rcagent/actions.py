"""The action format: one JSON object {thought, action, arguments}, and its JSON schema.

`action_schema` is the one definition of what a step may do. It enumerates the tool names and, for entity
parameters and finalize's root causes, the job's inventory, so that a constrained model cannot invent either;
the same schema, without the length bounds that keep a generated action short, is the contract every parsed
action is validated against (stabilizers.handlers.contract). `SchemaLimits` is what the run-dependent error
handlers rule out at this step: it narrows the schema, and `refuses` checks an action against it.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from rcagent.tools import Tool

# Bounds keep every action short enough to finish within the token budget (max_tokens), even when a
# small model fills a string with repetition: the longest finalize is about 1,300 characters.
THOUGHT_MAX = 160
TEXT_MAX = 200
FINALIZE_ARGS = ("root_causes", "root_cause", "solution", "evidence", "responsibility")
BUILTIN_ACTIONS = ("read_snapshot", "finalize")


@dataclass
class Action:
    thought: str
    name: str
    arguments: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {"thought": self.thought, "action": self.name, "arguments": self.arguments}


def as_list(value) -> list:
    """finalize's root_causes and evidence: a lone string is a list of one."""
    return [value] if isinstance(value, str) else list(value or []) if isinstance(value, (list, tuple)) else value


@dataclass
class SchemaLimits:
    """What the error handlers rule out at this step (see stabilizers.handlers.RULES)."""
    spent: dict[str, set[str]] = field(default_factory=dict)  # action -> targets ruled out ("" = no entity);
                                                              # read_snapshot -> keys read to the end
    allow_finalize: bool = True
    finalize_entities: list[str] | None = None                # None: the whole inventory
    evidence_min: int = 0
    pages_shown: dict[str, set[int]] | None = None            # set: read_snapshot takes no page (the next
                                                              # unread one is shown), a shown page is refused

    def merge(self, other: "SchemaLimits") -> "SchemaLimits":
        spent = {k: set(v) for k, v in self.spent.items()}
        for k, v in other.spent.items():
            spent.setdefault(k, set()).update(v)
        mine, theirs = self.finalize_entities, other.finalize_entities
        entities = theirs if mine is None else mine if theirs is None else [e for e in mine if e in theirs]
        return SchemaLimits(spent, self.allow_finalize and other.allow_finalize, entities,
                            max(self.evidence_min, other.evidence_min),
                            self.pages_shown if self.pages_shown is not None else other.pages_shown)

    def refuses(self, action: Action, target: str) -> str | None:
        """Why these limits rule the action out (None: they do not). `target` is the entity of a tool call
        ("" without one) or the key of a read_snapshot; the action's names are already inventory ids."""
        if target in self.spent.get(action.name, set()):
            return "spent"
        args = action.arguments
        if action.name == "read_snapshot" and self.pages_shown is not None and args.get("page") is not None:
            return "page" if args["page"] in self.pages_shown.get(target, set()) else None
        if action.name != "finalize":
            return None
        if not self.allow_finalize:
            return "finalize"
        if self.finalize_entities is not None and any(n not in self.finalize_entities for n in args["root_causes"]):
            return "unseen"
        evidence = as_list(args.get("evidence")) or [""]
        if any(len(str(e).strip()) < self.evidence_min for e in evidence):
            return "evidence"
        return None


def _param_schema(p, entities: list[str], bounded: bool) -> dict:
    if p.entity and entities:
        return {"type": "string", "enum": entities}
    if p.choices:
        return {"type": "string", "enum": list(p.choices)}
    if p.type != "string":
        return {"type": p.type}
    return {"type": "string", **({"maxLength": 60} if bounded else {}),
            **({"minLength": p.min_chars} if p.min_chars else {})}


def action_branch(name: str, properties: dict, required: list[str], bounded: bool) -> dict:
    return {"type": "object", "properties": {
        "thought": {"type": "string", **({"maxLength": THOUGHT_MAX} if bounded else {})},
        "action": {"type": "string", "enum": [name]},
        "arguments": {"type": "object", "properties": properties, "required": required,
                      "additionalProperties": False}},
        "required": ["thought", "action", "arguments"], "additionalProperties": False}


def finalize_schema(entities: list[str], evidence_min: int = 0, bounded: bool = True) -> dict:
    item = {"type": "string", "enum": entities} if entities else {"type": "string"}
    text = {"type": "string", **({"maxLength": TEXT_MAX} if bounded else {})}
    quote = {"type": "string", **({"maxLength": 120} if bounded else {}),
             **({"minLength": evidence_min} if evidence_min else {})}
    return {
        "root_causes": {"type": "array", "items": item, "minItems": 1, **({"maxItems": 3} if bounded else {})},
        "root_cause": text,
        "solution": text,
        "evidence": {"type": "array", "items": quote, **({"minItems": 1, "maxItems": 3} if bounded else {})},
        "responsibility": {"type": "string", **({"maxLength": 60} if bounded else {})},
    }


def action_schema(tools: dict[str, Tool], entities: list[str], allow_tools: bool = True,
                  snapshot_keys: list[str] | None = None, limits: SchemaLimits | None = None,
                  bounded: bool = True) -> dict:
    """anyOf one branch per tool, read_snapshot (once the run has snapshots: their keys enumerated) and
    finalize; only finalize when allow_tools is False. `limits` drops what the error handlers rule out.
    `bounded=False` gives the contract: no length bounds, only root_causes required of finalize, and
    read_snapshot listed even before the run has a snapshot."""
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
            props = {p.name: _param_schema(p, left, bounded) for p in tool.params}
            branches.append(action_branch(tool.name, props, [p.name for p in tool.params if p.required], bounded))
        keys = [k for k in snapshot_keys or [] if k not in limits.spent.get("read_snapshot", set())]
        if keys or not bounded:
            page = {} if limits.pages_shown is not None else {"page": {"type": "integer", "minimum": 1,
                                                                       **({"maximum": 99} if bounded else {})}}
            branches.append(action_branch("read_snapshot", {"key": {"type": "string", "enum": keys}, **page}, ["key"],
                                    bounded))
    if limits.allow_finalize or not branches:
        fin = finalize_schema(limits.finalize_entities or entities, limits.evidence_min, bounded)
        branches.append(action_branch("finalize", fin, list(fin) if bounded else ["root_causes"], bounded))
    return {"anyOf": branches} if len(branches) > 1 else branches[0]


def branch(schema: dict, name: str) -> dict | None:
    """The arguments schema of one action in an action schema (None: the schema does not offer it)."""
    for b in schema.get("anyOf", [schema]):
        if b["properties"]["action"]["enum"] == [name]:
            return b["properties"]["arguments"]
    return None
