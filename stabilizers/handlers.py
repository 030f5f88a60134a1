"""Error handlers: answer a well-formed but bad action with an error and a hint, instead of acting on it.

Each rule is defined once. What the action alone decides (a known tool, its arguments, inventory names, an
expert's non-trivial input) is the step's JSON schema (`rcagent.actions.action_schema`): `contract` validates
the parsed action against it, and constrained decoding generates from the same schema. What depends on the
run so far (a repeated call, a tool in a rut, a finalize before any inspection) is a `Rule` whose `limits`
say what it rules out at this step: `check` refuses an action they rule out, and `limits` narrows the next
step's schema by them, so a constrained model avoids the mistake instead of spending a step on it.
A refusal raises `Handled` (the rule's name, the error, a hint); the texts live in prompts/messages.yaml.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import jsonschema
from rapidfuzz import fuzz, process

from rcagent.actions import BUILTIN_ACTIONS, FINALIZE_ARGS, Action, SchemaLimits, action_schema, as_list, branch
from rcagent.errors import Handled, UnknownEntity
from rcagent.investigation import Investigation, call_text
from rcagent.prompts import message

EVIDENCE_MIN_CHARS = 10  # an evidence item shorter than this quotes nothing
SAME_TOOL_RUN = 3        # a tool called this many times in a row is a rut: the next call must use another


def refuse(rule: str, text: str, /, **values) -> Handled:
    """The refusal of `rule`, worded by the message `text` of prompts/messages.yaml."""
    return Handled(rule, message(text, "error", **values), message(text, "hint", **values))


# ---- the contract: the action against the step's schema ------------------------------------------------
def normalize(action: Action, inv: Investigation) -> Action:
    """The action as the contract reads it: empty arguments dropped, entity names resolved to inventory ids
    (case, unique prefix), finalize's root causes and evidence as lists, a snapshot key stripped."""
    args = {k: v for k, v in action.arguments.items() if v not in (None, "")}
    tool = inv.tools.get(action.name)

    def resolve(name):
        try:
            return inv.job.resolve(name).id if isinstance(name, str) else name
        except UnknownEntity:
            return name
    if tool and tool.entity_param and tool.entity_param.name in args:
        args[tool.entity_param.name] = resolve(args[tool.entity_param.name])
    if action.name == "finalize":
        for key in ("root_causes", "evidence"):
            if key in args:
                args[key] = as_list(args[key])
        if isinstance(args.get("root_causes"), list):
            names = []
            for n in map(resolve, args["root_causes"]):
                names += [n] if n not in names else []   # not dict.fromkeys: a bad item may be unhashable
            args["root_causes"] = names
    if action.name == "read_snapshot":
        if isinstance(args.get("key"), str):
            args["key"] = args["key"].strip()
        if isinstance(args.get("page"), str) and args["page"].strip().isdigit():
            args["page"] = int(args["page"])
    return Action(action.thought, action.name, args)


def contract(action: Action, inv: Investigation) -> None:
    """Validate a normalized action against the step's schema without its length bounds."""
    schema = action_schema(inv.tools, inv.entities, snapshot_keys=list(inv.pages), bounded=False)
    args_schema = branch(schema, action.name)
    if args_schema is None:
        known = list(inv.tools) + list(BUILTIN_ACTIONS)
        nearest = process.extractOne(action.name, known, scorer=fuzz.WRatio)
        near = message("did_you_mean", name=nearest[0]) if nearest and nearest[1] >= 60 else ""
        raise refuse("unknown_tool", "unknown_tool", name=action.name, near=near, known=", ".join(known))
    errors = list(jsonschema.Draft202012Validator(args_schema).iter_errors(action.arguments))
    if errors:
        raise _contract_refusal(action, inv, args_schema, errors)


def _contract_refusal(action: Action, inv: Investigation, args_schema: dict, errors: list) -> Handled:
    """The refusal for the most basic schema error: the argument names, then inventory names, then values."""
    def first(e):
        return (list(e.path) or [None])[0]
    required = [e.message.split("'")[1] for e in errors if e.validator == "required"]
    extra = [k for k in action.arguments if k not in args_schema["properties"]]
    names = [e for e in errors if e.validator == "enum" and _is_entity(action, inv, e.path)]
    if action.name == "finalize" and ("root_causes" in required or any(
            first(e) == "root_causes" and e.validator != "enum" for e in errors)):
        rc = action.arguments.get("root_causes")
        return refuse("bad_arguments", "no_root_causes" if not rc else "bad_root_causes",
                      arguments=", ".join(FINALIZE_ARGS))
    if action.name == "read_snapshot" and not (extra or required) and any(first(e) == "key" for e in errors):
        return refuse("bad_arguments", "no_snapshot", key=action.arguments.get("key"),
                      keys=", ".join(inv.pages) or message("none_yet"))
    tool = inv.tools.get(action.name)
    signature = tool.signature() if tool else f"{action.name}({', '.join(args_schema['properties'])})"
    if extra or required:
        what = "; ".join(([message("unknown_argument", names=", ".join(extra))] if extra else [])
                         + ([message("missing_argument", names=", ".join(required))] if required else []))
        example = call_text(tool.name, {p.name: "<entity>" for p in tool.params if p.entity}) if tool else signature
        return refuse("bad_arguments", "bad_arguments", tool=action.name, what=what, signature=signature,
                      example=example)
    if names:
        name = names[0].instance
        return refuse("unknown_entity", "unknown_entity", name=name, nearest=", ".join(inv.job.nearest(str(name))))
    trivial = [e for e in errors if e.validator == "minLength" and tool and tool.expert]
    if trivial:
        p = next(p for p in tool.params if p.name == first(trivial[0]))
        return refuse("trivial_input", "trivial_input", tool=tool.name, param=p.name, value=trivial[0].instance,
                      chars=p.min_chars, doc=p.doc)
    wrong = list(dict.fromkeys(str(first(e)) for e in errors if e.path))
    choices = "; ".join(message("is_one_of", name=p.name, choices=", ".join(p.choices))
                        for p in (tool.params if tool else ()) if p.choices)
    return refuse("bad_arguments", "bad_value", tool=action.name, names=", ".join(wrong) or "arguments",
                  signature=signature, choices=f"; {choices}" if choices else "")


def _is_entity(action: Action, inv: Investigation, path) -> bool:
    path = list(path)
    if action.name == "finalize":
        return path[:1] == ["root_causes"] and len(path) == 2
    tool = inv.tools.get(action.name)
    return bool(tool and tool.entity_param and path == [tool.entity_param.name])


# ---- the rules that depend on the run so far ------------------------------------------------------------
@dataclass(frozen=True)
class Rule:
    name: str
    limits: Callable[[Investigation], SchemaLimits]          # what the rule rules out at this step
    explain: Callable[[Action, Investigation, str], Handled]  # the refusal, given SchemaLimits.refuses' reason


def _no_repeats(inv: Investigation) -> SchemaLimits:
    """A tool runs once per entity (the overview is in the task already); a snapshot's pages are shown once,
    in order, so read_snapshot takes no page and a snapshot read to the end is spent."""
    spent: dict[str, set[str]] = {"overview": {""}, "read_snapshot": inv.read_to_the_end()}
    for _, a in inv.history:
        if a.name in inv.tools:
            spent.setdefault(a.name, set()).add(inv.target(a))
    return SchemaLimits(spent=spent, pages_shown=inv.shown)


def _explain_repeat(action: Action, inv: Investigation, why: str) -> Handled:
    key = inv.target(action)
    if action.name == "read_snapshot":
        if why == "spent":
            return refuse("repeated_call", "snapshot_read", key=key, suspect=inv.next_suspect())
        return refuse("repeated_call", "page_shown", page=action.arguments["page"], key=key,
                      suspect=inv.next_suspect())
    if action.name == "overview" and not key:
        return refuse("repeated_call", "overview_shown", suspect=inv.next_suspect())
    step, earlier = next((s, a) for s, a in inv.history if a.name == action.name and inv.target(a) == key)
    return refuse("repeated_call", "repeated_call", call=call_text(earlier.name, earlier.arguments), step=step,
                  suspect=inv.next_suspect())


def rut(inv: Investigation) -> str | None:
    """The tool of the last SAME_TOOL_RUN steps when they all used one tool (e.g. topology on everything)."""
    last = [a.name for _, a in inv.history[-SAME_TOOL_RUN:]]
    return last[0] if len(last) == SAME_TOOL_RUN and len(set(last)) == 1 and last[0] in inv.tools else None


def _no_rut(inv: Investigation) -> SchemaLimits:
    stuck = rut(inv)
    return SchemaLimits(spent={stuck: set(inv.job.entities) | {""}} if stuck else {})


def _explain_rut(action: Action, inv: Investigation, why: str) -> Handled:
    return refuse("loop", "rut", tool=action.name, times=SAME_TOOL_RUN)


def _evidence_first(inv: Investigation) -> SchemaLimits:
    """finalize only after a tool call, naming only entities inspected, quoting evidence."""
    return SchemaLimits(allow_finalize=bool(inv.looked_at), finalize_entities=sorted(inv.covered()) or None,
                        evidence_min=EVIDENCE_MIN_CHARS)


def _explain_premature(action: Action, inv: Investigation, why: str) -> Handled:
    if why == "finalize":
        return refuse("premature_finalize", "blind_finalize", suspect=inv.next_suspect())
    if why == "unseen":
        seen = inv.covered()
        unseen = [n for n in action.arguments["root_causes"] if n not in seen]
        return refuse("premature_finalize", "unseen_root_cause", names=", ".join(unseen),
                      call=call_text("metrics", {"entity": unseen[0]}), inspected=", ".join(sorted(inv.looked_at)[:5]))
    return refuse("premature_finalize", "no_evidence", chars=EVIDENCE_MIN_CHARS)


RULES = (Rule("repeated_call", _no_repeats, _explain_repeat), Rule("loop", _no_rut, _explain_rut),
         Rule("premature_finalize", _evidence_first, _explain_premature))


def check(action: Action, inv: Investigation) -> None:
    """Refuse a (normalized, contract-valid) action that a rule rules out at this step."""
    for rule in RULES:
        why = rule.limits(inv).refuses(action, inv.target(action))
        if why:
            raise rule.explain(action, inv, why)


def limits(inv: Investigation) -> SchemaLimits:
    """Everything the rules rule out at this step, for the next step's schema."""
    out = SchemaLimits()
    for rule in RULES:
        out = out.merge(rule.limits(inv))
    return out
