"""Information tools: semantically minimal, one entity parameter each (at most one more), and a registry.

The registry is the single source of the tool docs in the prompt and of the action schema's enumerations.
A tool compares the flagged window with the baseline and returns plain text (the observation).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from rcagent.job import Job


@dataclass(frozen=True)
class Param:
    name: str
    doc: str
    type: str = "string"            # JSON schema type
    required: bool = True
    entity: bool = False            # values must come from the job's inventory
    choices: tuple[str, ...] = ()   # a fixed enumeration, if any
    min_chars: int = 0              # shorter input is trivial (error handler), e.g. for an expert


@dataclass(frozen=True)
class Tool:
    name: str
    doc: str
    params: tuple[Param, ...]
    run: Callable[..., str] = field(compare=False)
    expert: bool = False            # an LLM expert agent rather than a plain query
    available: Callable[[Job], bool] | None = field(default=None, compare=False)  # offered only on such jobs

    def signature(self) -> str:
        args = ", ".join(p.name if p.required else f"{p.name}?" for p in self.params)
        return f"{self.name}({args})"

    @property
    def entity_param(self) -> Param | None:
        return next((p for p in self.params if p.entity), None)


REGISTRY: dict[str, Tool] = {}


def register(name: str, doc: str, *params: Param, expert: bool = False,
             available: Callable[[Job], bool] | None = None):
    """Decorator: add a function `fn(job, **args) -> str` to the registry. `available(job)`, if given,
    decides per job whether the tool is offered (logs needs log lines, the code expert a code/ folder)."""
    if len(params) > 2:
        raise ValueError(f"tool {name}: at most one entity and one more parameter")

    def wrap(fn):
        REGISTRY[name] = Tool(name, doc, tuple(params), fn, expert, available)
        return fn
    return wrap


def has_rows(table: str) -> Callable[[Job], bool]:
    """`available=` for a tool that only reads `table`: a tool that could only answer "no data" is not offered."""
    return lambda job: bool(job.rows.get(table))


def entity_param(doc: str = "a service, pod or node of the inventory") -> Param:
    return Param("entity", doc, entity=True)


def tool_docs(tools: dict[str, Tool]) -> str:
    lines = []
    for tool in tools.values():
        lines.append(f"- {tool.signature()}: {tool.doc}")
        for p in tool.params:
            extra = f" One of: {', '.join(p.choices)}." if p.choices else ""
            lines.append(f"    {p.name}{'' if p.required else ' (optional)'}: {p.doc}.{extra}")
    return "\n".join(lines)


def run_tool(tool: Tool, job: Job, args: dict, ctx=None) -> str:
    """Resolve entity arguments (fuzzy, with 'did you mean') and run the tool. An expert tool also gets
    `ctx` (rcagent.experts.ExpertContext): its way to the model and to the step's record."""
    args = dict(args)
    for p in tool.params:
        if p.entity and args.get(p.name) not in (None, ""):
            args[p.name] = job.resolve(str(args[p.name])).id
    if tool.expert:
        if ctx is None:
            raise ValueError(f"{tool.name} is an expert and needs a model context")
        return tool.run(job, ctx=ctx, **args)
    return tool.run(job, **args)


def load_builtin_tools() -> dict[str, Tool]:
    """The information tools (the expert agents: rcagent.experts.expert_tools)."""
    # Importing the modules registers their tools.
    from rcagent.tools import overview, metrics, logs, calls, events, topology  # noqa: F401
    return {name: tool for name, tool in REGISTRY.items() if not tool.expert}
