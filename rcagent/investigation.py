"""What an investigation has done so far: the calls it took, the entities it inspected, the snapshot pages
it was shown. The controller records into it; the error handlers and self-consistency read it."""
from __future__ import annotations

import json
from dataclasses import dataclass, field

from rcagent.actions import Action
from rcagent.job import Job
from rcagent.tools import Tool


@dataclass
class Investigation:
    job: Job
    tools: dict[str, Tool]
    history: list[tuple[int, Action]] = field(default_factory=list)   # (step, action) of the tool calls
    looked_at: list[str] = field(default_factory=list)                # entities inspected, in order
    pages: dict[str, int] = field(default_factory=dict)               # snapshot key -> its number of pages
    shown: dict[str, set[int]] = field(default_factory=dict)          # snapshot key -> pages shown

    @property
    def entities(self) -> list[str]:
        return sorted(self.job.entities)

    def target(self, action: Action) -> str:
        """The entity a tool call is about ("" for none), or the key a read_snapshot reads."""
        if action.name == "read_snapshot":
            return str(action.arguments.get("key", ""))
        tool = self.tools.get(action.name)
        return str(action.arguments.get(tool.entity_param.name, "")) if tool and tool.entity_param else ""

    def record(self, step: int, action: Action) -> None:
        """A tool call that ran (its entity names already resolved to inventory ids)."""
        self.history.append((step, action))
        if action.name in self.tools and self.target(action):
            self.looked_at.append(self.target(action))

    def covered(self) -> set[str]:
        """Entities inspected, with the pods of an inspected service or node and a pod's service."""
        out: set[str] = set()
        for name in self.looked_at:
            ent = self.job.entities[name]
            out.update(self.job.members(ent))
            if ent.kind == "pod" and ent.service in self.job.entities:
                out.add(ent.service)
        return out

    def add_snapshot(self, key: str, pages: int) -> None:
        self.pages[key], self.shown[key] = pages, {1}   # the head shown in the prompt is (about) page 1

    def next_page(self, key: str) -> int | None:
        """The first page of a snapshot not shown yet (None: all were)."""
        return next((p for p in range(1, self.pages.get(key, 1) + 1) if p not in self.shown.get(key, set())), None)

    def read_to_the_end(self) -> set[str]:
        return {k for k in self.pages if self.next_page(k) is None}

    def next_suspect(self) -> str:
        """A concrete next call: the most anomalous entity not inspected yet, with a tool not used on it."""
        from rcagent.tools.overview import ranking

        seen = set(self.looked_at)
        entity = next((e for e, _, _ in ranking(self.job) if e not in seen), None) or self.entities[0]
        spent = {a.name for _, a in self.history if self.target(a) == entity}
        tool = next((t for t in ("logs", "metrics", "calls", "topology") if t in self.tools and t not in spent),
                    next(iter(self.tools), "metrics"))
        return call_text(tool, {"entity": entity})


def call_text(name: str, args: dict) -> str:
    return f"{name}({', '.join(f'{k}={json.dumps(v)}' for k, v in args.items())})"
