"""Error handlers: checks that answer a well-formed but bad action with an error and a hint, instead of acting.

Each check takes the action and the agent (the Controller) and raises `Handled` to reject it; the
controller appends the message, counts the step invalid and records the handler's name on the step.
With constrained decoding, `limits()` narrows the next step's schema the same way, so that a constrained
model avoids the handled mistakes instead of spending a step on them: a (tool, entity) pair already called
is no longer offered, finalize appears only after a tool call and names only entities that were inspected.
"""
from __future__ import annotations

import json
from typing import TYPE_CHECKING

from rapidfuzz import fuzz, process

from rcagent.actions import FINALIZE_ARGS, SchemaLimits
from rcagent.errors import Handled, UnknownEntity

if TYPE_CHECKING:
    from rcagent.actions import Action
    from rcagent.controller import Controller

BUILTIN_ACTIONS = ("read_snapshot", "finalize")
NEAR_IDENTICAL = 80      # rapidfuzz ratio of the non-entity arguments above which two calls are the same
EVIDENCE_MIN_CHARS = 10  # an evidence item shorter than this quotes nothing
SAME_TOOL_RUN = 3        # a tool called this many times in a row is a rut: the next call must use another


# ---- helpers ------------------------------------------------------------------------------------
def resolved(agent: "Controller", action: "Action") -> dict:
    """The action's arguments with entity names resolved to inventory ids (unresolvable ones kept)."""
    tool = agent.tools.get(action.name)
    args = {k: v for k, v in action.arguments.items() if v not in (None, "")}
    if tool and tool.entity_param and tool.entity_param.name in args:
        try:
            args[tool.entity_param.name] = agent.job.resolve(str(args[tool.entity_param.name])).id
        except UnknownEntity:
            pass
    return args


def call_text(name: str, args: dict) -> str:
    return f"{name}({', '.join(f'{k}={json.dumps(v)}' for k, v in args.items())})"


def covered(agent: "Controller") -> set[str]:
    """Entities the agent inspected, with the pods of an inspected service or node and a pod's service."""
    out: set[str] = set()
    for name in agent.looked_at:
        ent = agent.job.entities[name]
        out.update(agent.job.members(ent))
        if ent.kind == "pod" and ent.service in agent.job.entities:
            out.add(ent.service)
    return out


def next_suspect(agent: "Controller") -> str:
    """A concrete next call: the most anomalous entity not inspected yet, with a tool not used on it."""
    from rcagent.tools.overview import ranking
    seen = set(agent.looked_at)
    entity = next((e for e, _, _ in ranking(agent.job) if e not in seen), None) or sorted(agent.job.entities)[0]
    spent = {a.name for _, a in agent.history if resolved(agent, a).get("entity") == entity}
    tool = next((t for t in ("logs", "metrics", "calls", "topology") if t in agent.tools and t not in spent),
                next(iter(agent.tools), "metrics"))
    return call_text(tool, {"entity": entity})


# ---- the checks, in the order they run -----------------------------------------------------------------
def unknown_tool(action: "Action", agent: "Controller") -> None:
    known = list(agent.tools) + list(BUILTIN_ACTIONS)
    if action.name not in known:
        nearest = process.extractOne(action.name, known, scorer=fuzz.WRatio)
        near = f"did you mean {nearest[0]}? " if nearest and nearest[1] >= 60 else ""
        raise Handled("unknown_tool", f"unknown tool '{action.name}'.", f"{near}Choose one of: {', '.join(known)}.")


def bad_arguments(action: "Action", agent: "Controller") -> None:
    if action.name == "finalize":
        names = action.arguments.get("root_causes")
        if not names:
            raise Handled("bad_arguments", "finalize needs root_causes.",
                          f"give {', '.join(FINALIZE_ARGS)}; root_causes lists inventory entities, best first.")
        if not isinstance(names, str) and not (isinstance(names, list) and all(isinstance(n, str) for n in names)):
            raise Handled("bad_arguments", "finalize: root_causes must be a list of entity names.",
                          "give root_causes as a list of names from the inventory, best first.")
        return
    if action.name == "read_snapshot":
        keys = list(agent.page_counts)
        if not isinstance(action.arguments.get("key"), str):
            raise Handled("bad_arguments", "read_snapshot: key must be a snapshot key such as S1.",
                          f"read one of: {', '.join(keys) or 'none yet'}.")
        key = str(action.arguments.get("key") or "").strip()
        if key not in keys:
            raise Handled("bad_arguments", f"no snapshot '{key}' in this run.",
                          f"read one of: {', '.join(keys) or 'none yet'}.")
        return
    tool = agent.tools[action.name]
    allowed = [p.name for p in tool.params]
    extra = [k for k in action.arguments if k not in allowed]
    missing = [p.name for p in tool.params if p.required and action.arguments.get(p.name) in (None, "")]
    wrong = [p.name for p in tool.params if action.arguments.get(p.name) not in (None, "") and (
             (p.type == "string" and not isinstance(action.arguments.get(p.name), str))
             or (p.choices and action.arguments.get(p.name) not in p.choices))]
    if wrong and not extra and not missing:
        choices = "; ".join(f"{p.name} is one of {', '.join(p.choices)}" for p in tool.params if p.choices)
        raise Handled("bad_arguments", f"{tool.name}: bad value for {', '.join(wrong)}.",
                      f"call it as {tool.signature()} with names from the inventory{'; ' + choices if choices else ''}.")
    if extra or missing:
        what = (f"unknown argument(s) {', '.join(extra)}" if extra else "") + \
               ("; " if extra and missing else "") + (f"missing {', '.join(missing)}" if missing else "")
        example = call_text(tool.name, {p.name: "<entity>" for p in tool.params if p.entity})
        raise Handled("bad_arguments", f"{tool.name}: {what}.", f"call it as {tool.signature()}, e.g. {example}.")


def unknown_entity(action: "Action", agent: "Controller") -> None:
    tool = agent.tools.get(action.name)
    if action.name == "finalize":
        names = action.arguments.get("root_causes")
        names = [names] if isinstance(names, str) else list(names or [])
    elif tool and tool.entity_param and action.arguments.get(tool.entity_param.name) not in (None, ""):
        names = [action.arguments[tool.entity_param.name]]
    else:
        return
    for name in names:
        try:
            agent.job.resolve(str(name))
        except UnknownEntity as exc:
            raise Handled("unknown_entity", f"'{name}' is not in the inventory.",
                          f"nearest names: {', '.join(exc.suggestions)}; use a name exactly as the overview "
                          "or topology shows it.") from None


def trivial_input(action: "Action", agent: "Controller") -> None:
    tool = agent.tools.get(action.name)
    if not tool or not tool.expert:
        return
    for p in tool.params:
        value = str(action.arguments.get(p.name) or "").strip()
        if p.min_chars and (p.required or value) and len(value) < p.min_chars:
            raise Handled("trivial_input", f"{tool.name} got a trivial {p.name} ('{value}').",
                          f"give the expert a real {p.name} of at least {p.min_chars} characters: {p.doc}.")


def repeated_call(action: "Action", agent: "Controller") -> None:
    if action.name == "finalize":
        return
    if action.name == "read_snapshot":
        key = str(action.arguments["key"]).strip()
        page = agent.snapshot_page(key, action.arguments.get("page"))
        if page is None:
            raise Handled("repeated_call", f"every page of snapshot {key} was already shown.",
                          f"move on: {next_suspect(agent)}, or finalize.")
        if page in agent.pages_read.get(key, set()):
            raise Handled("repeated_call", f"page {page} of snapshot {key} was already shown.",
                          f"read_snapshot(key=\"{key}\") shows the next unread page; or {next_suspect(agent)}.")
        return
    args = resolved(agent, action)
    if action.name == "overview" and not args:
        raise Handled("repeated_call", "the overview is already in the task above.",
                      f"inspect a suspect instead: {next_suspect(agent)}.")
    for step, earlier in agent.history:
        if earlier.name == action.name and resolved(agent, earlier) == args:
            raise Handled("repeated_call", f"you already called {call_text(action.name, args)} at step {step}; "
                          "its result is above.", f"call another tool or entity: {next_suspect(agent)}.")


def rut(agent: "Controller") -> str | None:
    """The tool of the last SAME_TOOL_RUN steps when they all used one tool (e.g. topology on everything)."""
    last = [a.name for _, a in agent.history[-SAME_TOOL_RUN:]]
    return last[0] if len(last) == SAME_TOOL_RUN and len(set(last)) == 1 and last[0] in agent.tools else None


def loop(action: "Action", agent: "Controller") -> None:
    """Near-identical or alternating calls within a sliding window: the same tool on the same entity twice
    more with other arguments, or once more with nearly the same ones; or one tool in a rut."""
    if action.name in BUILTIN_ACTIONS:
        return
    if rut(agent) == action.name:
        raise Handled("loop", f"{action.name} was called {SAME_TOOL_RUN} times in a row.",
                      "look at the evidence with another tool (metrics, logs, calls), or finalize.")
    tool = agent.tools[action.name]
    args = resolved(agent, action)
    entity = args.get(tool.entity_param.name) if tool.entity_param else None
    rest = json.dumps({k: v for k, v in args.items() if k != "entity"}, sort_keys=True)
    same = []
    for step, earlier in agent.history[-agent.settings.loop_window:]:
        e_args = resolved(agent, earlier)
        if earlier.name == action.name and (e_args.get("entity") if tool.entity_param else None) == entity:
            same.append(json.dumps({k: v for k, v in e_args.items() if k != "entity"}, sort_keys=True))
    near = [r for r in same if fuzz.ratio(r, rest) >= NEAR_IDENTICAL]
    if len(same) >= 2 or near:
        target = f" on {entity}" if entity else ""
        raise Handled("loop", f"you are going round in circles: {action.name}{target} was called "
                      f"{len(same)} time(s) in the last {agent.settings.loop_window} steps.",
                      f"use what you saw and move on: {next_suspect(agent)}, or finalize.")


def premature_finalize(action: "Action", agent: "Controller") -> None:
    if action.name != "finalize":
        return
    if not agent.looked_at:
        raise Handled("premature_finalize", "finalize before any evidence was gathered: no tool was called yet.",
                      f"inspect the top suspect first: {next_suspect(agent)}.")
    names = action.arguments.get("root_causes")
    names = [names] if isinstance(names, str) else list(names)
    seen = covered(agent)
    unseen = [n for n in names if agent.job.resolve(str(n)).id not in seen]
    if unseen:
        raise Handled("premature_finalize", f"root_causes names {', '.join(map(str, unseen))}, never inspected.",
                      f"inspect it first, e.g. {call_text('metrics', {'entity': str(unseen[0])})}, or name only "
                      f"entities you inspected: {', '.join(sorted(agent.looked_at)[:5])}.")
    evidence = action.arguments.get("evidence") or []
    evidence = [evidence] if isinstance(evidence, str) else evidence
    if not any(len(str(e).strip()) >= EVIDENCE_MIN_CHARS for e in evidence):
        raise Handled("premature_finalize", "finalize without evidence.",
                      "quote in evidence the observations that support the root cause: a metric that moved, "
                      "a log line, a call rate or latency.")


HANDLERS = (unknown_tool, bad_arguments, unknown_entity, trivial_input, repeated_call, loop, premature_finalize)


# ---- the same rules as schema limits, for constrained decoding ---------------------------------------
def limits(agent: "Controller") -> SchemaLimits:
    spent: dict[str, set[str]] = {"overview": {""}}   # the overview is in the task already
    for _, a in agent.history:
        tool = agent.tools.get(a.name)
        if tool is not None:
            args = resolved(agent, a)
            spent.setdefault(a.name, set()).add(str(args.get(tool.entity_param.name, "")) if tool.entity_param else "")
    stuck = rut(agent)
    if stuck:
        spent[stuck] = set(agent.job.entities) | {""}
    # snapshot keys whose every page was shown are no longer offered
    spent["read_snapshot"] = {k for k in agent.page_counts if agent.snapshot_page(k, None) is None}
    # no page number: a small model asks for a page it has seen (measured: page 3 of S1 ten times in a run)
    return SchemaLimits(spent=spent, allow_finalize=bool(agent.looked_at),
                        finalize_entities=sorted(covered(agent)) or None, evidence_min=EVIDENCE_MIN_CHARS,
                        snapshot_pages=False)
