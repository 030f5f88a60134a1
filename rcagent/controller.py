"""The ReAct controller: the whole agent loop.

The model emits one JSON action per step; stabilizers repair its output (JsonRegen) and reject bad actions
with a hint (error handlers); tools observe the job; long observations go behind a snapshot key (OBSK);
`finalize` ends the run with a diagnosis; the step limit ends it with a best-effort one. Control flow uses
exceptions that carry the message to append, as in mini-swe-agent. Every step is saved as it happens.
"""
from __future__ import annotations

import json
import threading
import time
from typing import Callable

from rcagent import explain, prompts
from rcagent.actions import Action, SchemaLimits, action_schema
from rcagent.config import Settings
from rcagent.consistency import check_settings, self_consistency
from rcagent.diagnosis import Diagnosis, RootCause
from rcagent.errors import AgentMessage, BadInput, FormatError, Handled, TimeLimit, ToolError, UnknownEntity
from rcagent.fusion import fuse
from rcagent.job import Job
from rcagent.serving import Backend, Completion, cached_complete, neutral_messages
from rcagent.stabilizers.handlers import HANDLERS, limits
from rcagent.stabilizers.jsonregen import JsonRegen, strict
from rcagent.store import Store
from rcagent.tools import Tool, load_builtin_tools, run_tool, tool_docs
from rcagent.tools.overview import ranking
from rcagent.validate import clean_answer

ECHO_MAX = 300
REGEN_ANSWER_MAX = 600    # how much of a bad answer the YAML restatement prompt quotes
REGEN_MAX_TOKENS = 400    # a YAML action is short; a longer restatement is degenerate


class ExpertCalls:
    """What an expert tool gets (rcagent.experts.ExpertContext): the run's model, counted and cached like
    the controller's own calls, and the step's record for its figures."""

    def __init__(self, controller: "Controller"):
        self.controller = controller

    def ask(self, messages: list[dict], schema: dict | None = None, max_tokens: int = 400) -> str:
        return self.controller.query(messages, schema, max_tokens).text

    def report(self, **figures) -> None:
        self.controller.expert_figures.update(figures)


class Finalized(Exception):
    def __init__(self, diagnosis: Diagnosis):
        self.diagnosis = diagnosis


class Controller:
    def __init__(self, job: Job, backend: Backend, store: Store, settings: Settings,
                 tools: dict[str, Tool] | None = None, progress: Callable[[dict], None] | None = None):
        self.job, self.backend, self.store, self.settings = job, backend, store, settings
        tools = tools if tools is not None else load_builtin_tools(experts=settings.experts)
        self.tools = {n: t for n, t in tools.items() if t.available is None or t.available(job)}
        self.progress = progress
        self.parse = JsonRegen(self.restate_as_yaml, settings.yaml_rounds) if settings.jsonregen else strict
        self.checks = HANDLERS if settings.handlers else ()
        if settings.ranking not in ("fused", "model"):
            raise BadInput(f"setting ranking: '{settings.ranking}' is not one of fused, model")
        check_settings(settings)
        if settings.mode not in ("react", "span"):
            raise BadInput(f"setting mode: '{settings.mode}' is not one of react, span")
        if not job.entities:
            raise BadInput(f"{job.path}: the job has no entities (no entities table and no telemetry names)")
        self.entities = sorted(job.entities)
        self.history: list[tuple[int, Action]] = []   # (step, action) of the tool calls taken
        self.looked_at: list[str] = []                # entities the agent inspected
        self.pages_read: dict[str, set[int]] = {}     # snapshot key -> pages shown (page 1 is the head)
        self.page_counts: dict[str, int] = {}         # snapshot key -> its number of pages, in key order
        self.messages: list[dict] = []
        self.step_messages: list[dict] = []            # the messages of the current step's model call
        self.expert_figures: dict = {}                 # what an expert tool reported on this step
        self.step = self.invalid = self.repaired = 0
        self.llm_calls = self.prompt_tokens = self.completion_tokens = 0
        self.run_id = ""

    # ---- the loop ------------------------------------------------------------------------------
    def run(self, deadline: float | None = None, cancel: threading.Event | None = None) -> Diagnosis:
        """Run to a diagnosis. `deadline` (time.monotonic()) is checked between steps: past it the run
        ends with TimeLimit, and a model call in flight finishes first (max_tokens bounds it). A set `cancel`
        event ends the run as interrupted (a batch stopped with Ctrl-C)."""
        start = time.perf_counter()
        s = self.settings
        self.run_id = self.store.start_run(self.job.id, str(self.job.path), self.backend.name,
                                           self.backend.model, {"max_steps": s.max_steps, "seed": s.seed,
                                                                "temperature": s.temperature,
                                                                "constrain": s.constrain, "jsonregen": s.jsonregen,
                                                                "handlers": s.handlers,
                                                                "schema_limits": s.schema_limits, "ranking": s.ranking,
                                                                "experts": s.experts})
        self.messages = [
            {"role": "system", "content": prompts.render("system", max_steps=s.max_steps,
                                                         tool_docs=prompts.ours(tool_docs(self.tools)))},
            {"role": "user", "content": prompts.render("task", job_id=self.job.id, alert=self.job.alert,
                                                       summary=prompts.data(self.job.summary()),
                                                       overview=prompts.data(self.primer()))},
        ]
        try:
            while True:
                if cancel is not None and cancel.is_set():
                    raise KeyboardInterrupt
                if deadline is not None and time.monotonic() > deadline:
                    raise TimeLimit(f"no answer after {self.step} steps: the time limit ran out")
                if self.step >= s.max_steps:
                    diagnosis = self.best_effort("the step limit was reached before finalize")
                    break
                try:
                    self.do_step()
                except Finalized as done:
                    diagnosis = done.diagnosis
                    if s.samples > 1:
                        diagnosis = self_consistency(self, diagnosis)
                    break
            status = "finalized" if diagnosis.finalized else "step_limit"
        except KeyboardInterrupt:
            self.store.end_run(self.run_id, "interrupted")
            raise
        except TimeLimit:
            self.store.end_run(self.run_id, "timeout")
            raise
        except Exception:
            self.store.end_run(self.run_id, "failed")
            raise
        self.fill_figures(diagnosis, time.perf_counter() - start)
        self.store.end_run(self.run_id, status, diagnosis.to_dict())
        return diagnosis

    def do_step(self) -> None:
        self.step += 1
        last = self.step == self.settings.max_steps
        messages = self.messages + ([{"role": "user", "content": prompts.render("last_step")}] if last else [])
        self.step_messages = messages
        completion = self.query(messages, self.schema(last))
        record = {"raw": completion.text, "prompt_tokens": completion.prompt_tokens,
                  "completion_tokens": completion.completion_tokens, "model_ms": completion.latency_ms}
        tool_start = time.perf_counter()
        action, rounds = None, []
        try:
            action, rounds = self.parse(completion.text)
            for check in self.checks:
                check(action, self)
            observation = self.execute(action)
        except Finalized as done:
            record["tool_ms"] = (time.perf_counter() - tool_start) * 1000
            self.save_step(action, record, rounds, observation="(finalized)")
            self.emit(action, completion)
            raise done
        except AgentMessage as msg:
            self.invalid += 1
            rounds = msg.rounds if isinstance(msg, FormatError) else rounds
            handler = msg.handler if isinstance(msg, Handled) else ("format" if action is None else "tool")
            error = str(msg)
            # Echo the parsed action, or at most the start of a bad answer: a degenerate one must not fill
            # the context.
            echo = json.dumps(action.to_dict()) if action else completion.text[:ECHO_MAX]
            self.messages += [{"role": "assistant", "content": echo},
                              {"role": "user", "content": prompts.render("error", error=error)}]
            self.store.add_step(self.run_id, self.step, action=action.name if action else "(invalid)",
                                arguments=action.arguments if action else None, valid=0, error=error,
                                handler=handler, repairs=json.dumps(rounds) if len(rounds) > 1 else None,
                                tool_ms=(time.perf_counter() - tool_start) * 1000, **record)
            self.emit(None, completion, error=error)
            return
        record["tool_ms"] = (time.perf_counter() - tool_start) * 1000
        head, key = self.shorten(action.name, observation)
        self.history.append((self.step, action))
        self.messages += [
            {"role": "assistant", "content": json.dumps(action.to_dict())},
            {"role": "user", "content": prompts.render("observation", step=self.step,
                                                       max_steps=self.settings.max_steps,
                                                       observation=prompts.data(head))},
        ]
        self.save_step(action, record, rounds, observation=head, snapshot=key)
        self.emit(action, completion)

    def schema(self, last: bool) -> dict | None:
        """The next action's JSON schema (None without constrained decoding), narrowed by the handlers."""
        if not self.settings.constrain:
            return None
        narrow = limits(self) if self.settings.handlers and self.settings.schema_limits else SchemaLimits()
        if last:
            narrow.allow_finalize = True
            return action_schema(self.tools, self.entities, allow_tools=False, limits=narrow)
        return action_schema(self.tools, self.entities, snapshot_keys=list(self.page_counts), limits=narrow)

    def finalize_schema(self) -> dict | None:
        """The schema of a finalize-only step: what self-consistency samples under."""
        return self.schema(last=True)

    def restate_as_yaml(self, answer: str, error: str) -> str:
        """JsonRegen's regeneration round: the model restates its own answer as YAML (unconstrained).

        The request continues the step's conversation, so the model knows the tools and the inventory, and
        the backend reuses the conversation's cached prefix instead of evaluating a new prompt."""
        names = ", ".join(list(self.tools) + ["read_snapshot", "finalize"])
        prompt = prompts.render("regen_yaml", error=error, tools=names)
        messages = self.step_messages + [{"role": "assistant", "content": answer[:REGEN_ANSWER_MAX]},
                                         {"role": "user", "content": prompt}]
        return self.query(messages, None, REGEN_MAX_TOKENS).text

    def primer(self) -> str:
        """The overview, computed before the first step: a tiny model starts from the anomaly ranking."""
        if "overview" not in self.tools:
            return "(no overview tool)"
        head, _ = self.shorten("overview", run_tool(self.tools["overview"], self.job, {}))
        return head

    # ---- model calls (cached by the full request, so a run replays) ------------------------------
    def query(self, messages: list[dict], schema: dict | None, max_tokens: int | None = None) -> Completion:
        self.llm_calls += 1
        c = cached_complete(self.backend, self.store, self.settings, messages, schema, max_tokens)
        self.prompt_tokens += c.prompt_tokens
        self.completion_tokens += c.completion_tokens
        return c

    def sample(self, messages: list[dict], schema: dict | None, n: int) -> list[Completion]:
        """n completions at the sampling temperature, never cached; the backend reuses the prompt's prefix."""
        s = self.settings
        out = self.backend.complete(neutral_messages(messages), schema=schema, n=n,
                                    temperature=s.sample_temperature, max_tokens=s.max_tokens)
        for c in out:
            c.text = clean_answer(c.text)
        self.llm_calls += len(out)
        self.prompt_tokens += sum(c.prompt_tokens for c in out)
        self.completion_tokens += sum(c.completion_tokens for c in out)
        return out

    # ---- actions -------------------------------------------------------------------------------
    def execute(self, action: Action) -> str:
        if action.name == "finalize":
            raise Finalized(self.finalize(action.arguments))
        if action.name == "read_snapshot":
            return self.read_snapshot(**self._args(action, ("key", "page")))
        if action.name not in self.tools:
            raise ToolError(f"unknown action '{action.name}'; choose one of: "
                            f"{', '.join(list(self.tools) + ['read_snapshot', 'finalize'])}.")
        tool = self.tools[action.name]
        args = self._args(action, tuple(p.name for p in tool.params))
        for p in tool.params:
            if p.name in args and p.type == "string" and not isinstance(args[p.name], str):
                raise ToolError(f"{tool.name}: {p.name} must be a string, e.g. "
                                f"{self.entities[0] if p.entity and self.entities else 'cpu'}.")
            if p.name in args and p.choices and args[p.name] not in p.choices:
                raise ToolError(f"{tool.name}: {p.name} is one of {', '.join(p.choices)}.")
        missing = [p.name for p in tool.params if p.required and not args.get(p.name)]
        if missing:
            raise ToolError(f"{tool.name} needs {', '.join(missing)}: {tool.signature()}.")
        try:
            observation = run_tool(tool, self.job, args, ctx=ExpertCalls(self) if tool.expert else None)
        except UnknownEntity as exc:
            raise ToolError(f"{exc}. Use a name from the inventory (overview or topology lists them).") from None
        except (ValueError, TypeError) as exc:
            raise ToolError(f"{tool.name}: {exc}") from None
        if args.get("entity"):
            self.looked_at.append(self.job.resolve(str(args["entity"])).id)
        return observation

    def _args(self, action: Action, allowed: tuple[str, ...]) -> dict:
        extra = [k for k in action.arguments if k not in allowed]
        if extra:
            raise ToolError(f"{action.name} takes {', '.join(allowed) or 'no arguments'}; "
                            f"unknown argument(s): {', '.join(extra)}.")
        return {k: v for k, v in action.arguments.items() if v not in (None, "")}

    def read_snapshot(self, key: str, page: int | str | None = None) -> str:
        if not isinstance(key, str) or isinstance(page, (bool, list, dict)):
            raise ToolError("read_snapshot takes key, a snapshot key such as S1 (and page, a number).")
        key = key.strip()
        text = self.store.snapshot(self.run_id, key)
        if text is None:
            raise ToolError(f"no snapshot '{key}'; keys of this run: {', '.join(self.page_counts) or 'none yet'}.")
        number = self.snapshot_page(key, page)
        if number is None:
            raise ToolError(f"every page of snapshot {key} was already shown.")
        self.pages_read.setdefault(key, set()).add(number)
        size = self.settings.head_chars
        chunk = text[(number - 1) * size: number * size]
        return f"[snapshot {key}, page {number} of {self.page_counts[key]}]\n{chunk}"

    def snapshot_page(self, key: str, page: int | str | None) -> int | None:
        """The page a read_snapshot call shows: the one asked for (clamped), else the first not yet shown."""
        pages = self.page_counts.get(key, 1)
        if page in (None, ""):
            unread = [p for p in range(1, pages + 1) if p not in self.pages_read.get(key, set())]
            return unread[0] if unread else None
        try:
            return max(1, min(int(page), pages))
        except (TypeError, ValueError):
            raise ToolError("page must be a number (1, 2, ...).") from None

    def shorten(self, tool: str, observation: str) -> tuple[str, str | None]:
        """OBSK: a long observation is stored whole; the prompt sees its head and the key."""
        if len(observation) <= self.settings.snapshot_threshold or tool == "read_snapshot":
            return observation, None
        key = self.store.put_snapshot(self.run_id, self.step, tool, observation)
        self.pages_read[key] = {1}  # the head is (about) page 1
        self.page_counts[key] = max(1, -(-len(observation) // self.settings.head_chars))
        head = observation[: self.settings.head_chars]
        cut = head.rfind("\n")
        head = head[:cut] if cut > len(head) // 2 else head
        rest = len(observation) - len(head)
        return f"{head}\n[... {rest} more characters stored as snapshot {key}; read_snapshot(key=\"{key}\") shows the next page]", key

    def finalize(self, args: dict) -> Diagnosis:
        return self.conclude(self.named_root_causes(args), args)

    def named_root_causes(self, args: dict) -> list[str]:
        """The inventory ids of a finalize's root_causes, in order; a ToolError when none is in the inventory."""
        names = args.get("root_causes") or []
        if isinstance(names, str):
            names = [names]
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise ToolError("finalize: root_causes is a list of entity names from the inventory, best first.")
        ranked, unknown = [], []
        for name in names:
            try:
                ent = self.job.resolve(str(name))
            except UnknownEntity:
                unknown.append(str(name))
                continue
            if ent.id not in [r.entity for r in ranked]:
                ranked.append(RootCause(ent.id, ent.kind, 0.0))
        if not ranked:
            hint = f" ({', '.join(unknown)} not in the inventory)" if unknown else ""
            raise ToolError(f"finalize needs root_causes: entities from the inventory, best first{hint}.")
        return [rc.entity for rc in ranked]

    def conclude(self, model_names: list[str], args: dict) -> Diagnosis:
        """The diagnosis from the model's ranked picks and its texts: fused with the evidence ranking
        (setting `ranking`), texts that are not sentences written from the evidence."""
        ranked = [RootCause(e, self.job.entities[e].kind, 0.0) for e in model_names]
        evidence = ranking(self.job)
        if self.settings.ranking == "fused":
            fused = fuse(model_names, [(e, s) for e, s, _ in evidence])
            ranked = [RootCause(e, self.job.entities[e].kind, s) for e, s in fused]
        else:
            for i, rc in enumerate(ranked):
                rc.score = round(1.0 / (i + 1), 3)
        return Diagnosis(job=self.job.id, run_id=self.run_id, root_causes=ranked, model_root_causes=model_names,
                         finalized=True, **self.texts(ranked, args, {e: r for e, _, r in evidence}))

    def texts(self, ranked: list[RootCause], args: dict, reasons: dict[str, list[str]]) -> dict:
        """The model's root cause, solution, evidence and responsibility; a field that is not a sentence
        (an entity name, "finalize") is written from the overview's evidence instead, and the note says which."""
        names = set(self.job.entities) | {"finalize"}
        top = ranked[0]
        evidence = args.get("evidence") or []
        out = {"root_cause": str(args.get("root_cause") or ""), "solution": str(args.get("solution") or ""),
               "evidence": [str(e) for e in (evidence if isinstance(evidence, list) else [evidence])],
               "responsibility": str(args.get("responsibility") or "")}
        written = []
        if not explain.is_sentence(out["root_cause"], names):
            out["root_cause"] = explain.explanation(top.entity, top.kind, reasons.get(top.entity, []))
            written.append("root cause")
        if not explain.is_sentence(out["solution"], names):
            out["solution"] = explain.solution(top.entity, reasons.get(top.entity, []))
            written.append("solution")
        if not any(explain.is_sentence(e, names) for e in out["evidence"]):
            out["evidence"] = [f"{rc.entity}: {'; '.join(reasons[rc.entity])}" for rc in ranked[:3]
                               if reasons.get(rc.entity)]
            written.append("evidence")
        if not explain.is_sentence(out["responsibility"], names, min_words=2):
            out["responsibility"] = f"the team that owns {top.entity}"
            written.append("responsibility")
        if written:
            out["note"] = f"{', '.join(written)} written from the evidence: the model's text was not a sentence"
        return out

    def best_effort(self, why: str) -> Diagnosis:
        """No finalize: rank what the agent looked at (else everything) by the overview's anomaly score."""
        ranked = ranking(self.job)
        seen = set(self.looked_at)
        pool = [r for r in ranked if r[0] in seen] or ranked
        causes = [RootCause(e, self.job.entities[e].kind, s) for e, s, _ in pool[:5]]
        evidence = [f"{e}: {'; '.join(r)}" for e, _, r in pool[:3]]
        if causes:
            text = f"Best effort ({why}): " + explain.explanation(causes[0].entity, causes[0].kind, pool[0][2])
            fix = explain.solution(causes[0].entity, pool[0][2])
        else:
            text, fix = f"Best effort ({why}): no entity moved noticeably.", "Widen the window or add telemetry."
        return Diagnosis(job=self.job.id, run_id=self.run_id, root_causes=causes, root_cause=text, solution=fix,
                         evidence=evidence, responsibility="on-call SRE", finalized=False, note=why)

    # ---- bookkeeping ------------------------------------------------------------------------------
    def fill_figures(self, d: Diagnosis, wall_s: float) -> None:
        d.run_id, d.steps, d.invalid_steps, d.repaired_steps = self.run_id, self.step, self.invalid, self.repaired
        d.llm_calls, d.prompt_tokens, d.completion_tokens = self.llm_calls, self.prompt_tokens, self.completion_tokens
        d.wall_s, d.backend, d.model = round(wall_s, 3), self.backend.name, self.backend.model

    def save_step(self, action: Action, record: dict, rounds: list[dict], observation: str,
                  snapshot: str | None = None) -> None:
        if len(rounds) > 1:
            self.repaired += 1
        if self.expert_figures:
            record["expert"] = json.dumps(self.expert_figures)
            self.expert_figures = {}
        self.store.add_step(self.run_id, self.step, thought=action.thought, action=action.name,
                            arguments=action.arguments, observation=observation, snapshot=snapshot, valid=1,
                            repairs=json.dumps(rounds) if len(rounds) > 1 else None, **record)

    def emit(self, action: Action | None, completion: Completion, error: str | None = None) -> None:
        if self.progress:
            self.progress({"step": self.step, "max_steps": self.settings.max_steps,
                           "action": action.name if action else "(invalid)",
                           "entity": (action.arguments.get("entity") or action.arguments.get("key")
                                      or ",".join(map(str, action.arguments.get("root_causes") or [])))
                           if action else "",
                           "tokens": completion.prompt_tokens + completion.completion_tokens,
                           "cached": completion.cached, "error": error})

