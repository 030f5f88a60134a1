"""The ReAct controller: the whole agent loop.

The model emits one JSON action per step; stabilizers repair its output (JsonRegen) and refuse bad actions
with a hint (the action contract and the error handlers); tools observe the job; long observations go
behind a snapshot key (OBSK); `finalize` ends the run with a diagnosis, the step limit with a best-effort
one. Control flow uses exceptions that carry the message to append, as in mini-swe-agent. Every step is
saved as it happens. The run's state lives in an Investigation; the diagnosis is built in conclusion.py.
"""
from __future__ import annotations

import json
import threading
import time
from typing import Callable

from rcagent import conclusion, prompts, snapshots
from rcagent.actions import Action, SchemaLimits, action_schema
from rcagent.config import Settings
from rcagent.consistency import check_settings, self_consistency
from rcagent.diagnosis import Diagnosis
from rcagent.errors import AgentMessage, BadInput, FormatError, Handled, TimeLimit, ToolError
from rcagent.experts import ExpertCalls, expert_tools
from rcagent.investigation import Investigation
from rcagent.job import Job
from rcagent.serving import Backend
from rcagent.serving.counted import CountedModel
from rcagent.stabilizers import handlers
from rcagent.stabilizers.jsonregen import JsonRegen, strict
from rcagent.store import Store
from rcagent.trajectory import Trajectory
from rcagent.tools import Tool, load_builtin_tools, run_tool, tool_docs

ECHO_MAX = 300
REGEN_ANSWER_MAX = 600    # how much of a bad answer the YAML restatement prompt quotes
REGEN_MAX_TOKENS = 400    # a YAML action is short; a longer restatement is degenerate
RUN_SETTINGS = ("max_steps", "seed", "temperature", "constrain", "jsonregen", "handlers", "schema_limits",
                "ranking", "experts")


class Finalized(Exception):
    def __init__(self, diagnosis: Diagnosis):
        self.diagnosis = diagnosis


class Controller:
    def __init__(self, job: Job, backend: Backend, store: Store, settings: Settings,
                 tools: dict[str, Tool] | None = None, progress: Callable[[dict], None] | None = None):
        if settings.ranking not in conclusion.RANKINGS:
            raise BadInput(f"setting ranking: '{settings.ranking}' is not one of {', '.join(conclusion.RANKINGS)}")
        check_settings(settings)
        if not job.entities:
            raise BadInput(f"{job.path}: the job has no entities (no entities table and no telemetry names)")
        self.job, self.backend, self.store, self.settings = job, backend, store, settings
        tools = tools if tools is not None else {**load_builtin_tools(), **(expert_tools() if settings.experts else {})}
        self.inv = Investigation(job, {n: t for n, t in tools.items() if t.available is None or t.available(job)})
        self.tools = self.inv.tools
        self.parse = JsonRegen(self.restate_as_yaml, settings.yaml_rounds) if settings.jsonregen else strict
        self.messages: list[dict] = []
        self.last_messages: list[dict] = []   # the messages of the current step's model call
        self.model = CountedModel(backend, store, settings)
        self.trajectory = Trajectory(store, settings.max_steps, progress)
        self.run_id = ""

    def run(self, deadline: float | None = None, cancel: threading.Event | None = None) -> Diagnosis:
        """Run to a diagnosis. `deadline` (time.monotonic()) is checked between steps: past it the run
        ends with TimeLimit, and a model call in flight finishes first (max_tokens bounds it). A set `cancel`
        event ends the run as interrupted (a batch stopped with Ctrl-C)."""
        start, s = time.perf_counter(), self.settings
        with self.store.run(self.job, self.backend, {k: getattr(s, k) for k in RUN_SETTINGS}) as record:
            self.run_id = self.trajectory.run_id = record.id
            self.messages = [
                {"role": "system", "content": prompts.render("system", max_steps=s.max_steps,
                                                             tool_docs=prompts.ours(tool_docs(self.tools)))},
                {"role": "user", "content": prompts.render("task", job_id=self.job.id, alert=self.job.alert,
                                                           summary=prompts.data(self.job.summary()),
                                                           overview=prompts.data(self.primer()))}]
            while True:
                if cancel is not None and cancel.is_set():
                    raise KeyboardInterrupt
                if deadline is not None and time.monotonic() > deadline:
                    raise TimeLimit(f"no answer after {self.trajectory.step} steps: the time limit ran out")
                if self.trajectory.step >= s.max_steps:
                    diagnosis = conclusion.best_effort(self.job, self.run_id, self.inv.looked_at,
                                                       "the step limit was reached before finalize")
                    break
                try:
                    self.do_step()
                except Finalized as done:
                    diagnosis = self_consistency(self, done.diagnosis) if s.samples > 1 else done.diagnosis
                    break
            self.fill_figures(diagnosis, time.perf_counter() - start)
            record.status = "finalized" if diagnosis.finalized else "step_limit"
            record.diagnosis = diagnosis.to_dict()
        return diagnosis

    def do_step(self) -> None:
        t = self.trajectory
        t.step += 1
        last = t.step == self.settings.max_steps
        self.last_messages = self.messages + ([{"role": "user", "content": prompts.render("last_step")}]
                                              if last else [])
        completion = self.model.query(self.last_messages, self.schema(last))
        tool_start = time.perf_counter()
        action, rounds = None, []
        try:
            action, rounds = self.parse(completion.text)
            action = self.accept(action)
            observation = self.act(action)
        except Finalized:
            t.save(action, completion, rounds, tool_start, observation="(finalized)")
            raise
        except AgentMessage as msg:
            rounds = msg.rounds if isinstance(msg, FormatError) else rounds
            handler = msg.handler if isinstance(msg, Handled) else ("format" if action is None else "tool")
            # Echo the parsed action, or at most the start of a bad answer: a degenerate one must not fill
            # the context.
            echo = json.dumps(action.to_dict()) if action else completion.text[:ECHO_MAX]
            self.messages += [{"role": "assistant", "content": echo},
                              {"role": "user", "content": prompts.render("error", error=str(msg))}]
            t.save(action, completion, rounds, tool_start, valid=0, error=str(msg), handler=handler)
            return
        head, key = snapshots.shorten(self.store, self.run_id, t.step, action.name, observation, self.inv,
                                      self.settings.snapshot_threshold, self.settings.head_chars)
        self.inv.record(t.step, action)
        self.messages += [{"role": "assistant", "content": json.dumps(action.to_dict())},
                          {"role": "user", "content": prompts.render("observation", step=t.step,
                                                                     max_steps=self.settings.max_steps,
                                                                     observation=prompts.data(head))}]
        t.save(action, completion, rounds, tool_start, observation=head, snapshot=key)

    def accept(self, action: Action) -> Action:
        """The action as it will run: normalized, valid against the step's contract, and (with the error
        handlers on) not ruled out by a rule; else a Handled error."""
        action = handlers.normalize(action, self.inv)
        handlers.contract(action, self.inv)
        if self.settings.handlers:
            handlers.check(action, self.inv)
        return action

    def act(self, action: Action) -> str:
        if action.name == "finalize":
            raise Finalized(self.conclude(action.arguments["root_causes"], action.arguments))
        if action.name == "read_snapshot":
            return snapshots.read(self.store, self.run_id, self.inv, action.arguments["key"],
                                  action.arguments.get("page"), self.settings.head_chars)
        tool = self.tools[action.name]
        try:
            return run_tool(tool, self.job, action.arguments, ctx=ExpertCalls(self.model, self.trajectory.expert_figures) if tool.expert else None)
        except (ValueError, TypeError) as exc:
            raise ToolError(prompts.message("tool_failed", tool=tool.name, reason=exc)) from None

    def conclude(self, names: list[str], args: dict) -> Diagnosis:
        return conclusion.conclude(self.job, self.run_id, names, args, self.settings.ranking,
                                   self.settings.model_vote)

    def schema(self, last: bool = False) -> dict | None:
        """The next action's JSON schema (None without constrained decoding), narrowed by the rules."""
        if not self.settings.constrain:
            return None
        s = self.settings
        narrow = handlers.limits(self.inv) if s.handlers and s.schema_limits else SchemaLimits()
        if last:
            narrow.allow_finalize = True
            return action_schema(self.tools, self.inv.entities, allow_tools=False, limits=narrow)
        return action_schema(self.tools, self.inv.entities, snapshot_keys=list(self.inv.pages), limits=narrow)

    def finalize_schema(self) -> dict | None:
        """The schema of a finalize-only step: what self-consistency samples under."""
        return self.schema(last=True)

    def restate_as_yaml(self, answer: str, error: str) -> str:
        """JsonRegen's regeneration round: the model restates its answer as YAML (unconstrained), continuing
        the step's conversation (it knows the tools and the inventory; the backend reuses the cached prefix)."""
        prompt = prompts.render("regen_yaml", error=error, tools=", ".join(list(self.tools) + ["read_snapshot", "finalize"]))
        messages = self.last_messages + [{"role": "assistant", "content": answer[:REGEN_ANSWER_MAX]},
                                         {"role": "user", "content": prompt}]
        return self.model.query(messages, None, REGEN_MAX_TOKENS).text

    def primer(self) -> str:
        """The overview, computed before the first step: a tiny model starts from the anomaly ranking."""
        if "overview" not in self.tools:
            return "(no overview tool)"
        return snapshots.shorten(self.store, self.run_id, 0, "overview", run_tool(self.tools["overview"], self.job, {}),
                                 self.inv, self.settings.snapshot_threshold, self.settings.head_chars)[0]

    def fill_figures(self, d: Diagnosis, wall_s: float) -> None:
        self.trajectory.fill(d)
        self.model.fill(d, wall_s)
