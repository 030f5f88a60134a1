"""A run's trajectory: every step written to the store as it happens (so an interrupted run can be replayed),
a progress event per step for the terminal, and the counts of invalid and repaired steps."""
from __future__ import annotations

import json
import time
from typing import Callable

from rcagent.actions import Action
from rcagent.serving import Completion
from rcagent.store import Store


class Trajectory:
    def __init__(self, store: Store, max_steps: int, progress: Callable[[dict], None] | None = None):
        self.store, self.max_steps, self.progress = store, max_steps, progress
        self.run_id = ""
        self.step = self.invalid = self.repaired = 0
        self.expert_figures: dict = {}    # what an expert tool reported on this step

    def fill(self, d) -> None:
        """Put the run's step counts into the Diagnosis `d`."""
        d.run_id, d.steps, d.invalid_steps, d.repaired_steps = self.run_id, self.step, self.invalid, self.repaired

    def save(self, action: Action | None, completion: Completion, rounds: list[dict], tool_start: float,
             valid: int = 1, error: str | None = None, **fields) -> None:
        """Store the step and emit its progress event. `rounds` are JsonRegen's (more than one: repaired)."""
        self.invalid += not valid
        self.repaired += bool(valid and len(rounds) > 1)
        if self.expert_figures:
            fields["expert"] = json.dumps(self.expert_figures)
            self.expert_figures.clear()
        self.store.add_step(
            self.run_id, self.step, thought=action.thought if action and valid else None,
            action=action.name if action else "(invalid)", arguments=action.arguments if action else None,
            valid=valid, error=error, repairs=json.dumps(rounds) if len(rounds) > 1 else None,
            raw=completion.text, prompt_tokens=completion.prompt_tokens, completion_tokens=completion.completion_tokens,
            model_ms=completion.latency_ms, tool_ms=(time.perf_counter() - tool_start) * 1000, **fields)
        if self.progress:
            args = action.arguments if action and valid else {}
            self.progress({"step": self.step, "max_steps": self.max_steps,
                           "action": action.name if action and valid else "(invalid)",
                           "entity": args.get("entity") or args.get("key") or args.get("table") or args.get("sql")
                           or ",".join(map(str, args.get("root_causes") or [])),
                           "tokens": completion.prompt_tokens + completion.completion_tokens,
                           "cached": completion.cached, "error": error})
