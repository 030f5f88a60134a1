"""SQL agent (RCAtlas's free harness): one ReAct loop over the job's tables with four tools.

list_tables, table_schema, query (one read-only SELECT in the SqlBox sandbox) and submit, plus read_snapshot
for a long result stored behind a key (OBSK, as in the ReAct mode). No call is prescribed and the prompt
holds no evidence ranking: the model finds its way through the data. The action is constrained to a JSON
schema, the query to a grammar (sqlgrammar: by default one table's own columns, so a query binds); a
malformed or refused action is answered with an error the model can act on. Submit is offered once a query
has run (a blind answer is no investigation), and is the only action of the last allowed call. A repeated
query is a rut: with schema limits on, the step is asked again at once without the query tool (a repair,
kept in the step's rounds); without them it is refused and the next step offers everything but query. The
same offer is checked when the output was not constrained. Older steps are collapsed to one line each, in
blocks, so the prompt fits the context and keeps a stable prefix for the model's cache. An answer still
missing after the last call (unconstrained output) gives the evidence ranking's best effort, and the note
says so.
"""
from __future__ import annotations

import json
import threading
import time

import jsonschema

from rcagent import conclusion, prompts, snapshots
from rcagent.actions import Action, action_branch, branch
from rcagent.diagnosis import Diagnosis
from rcagent.errors import AgentMessage, FormatError, TimeLimit
from rcagent.harnesses import sqlgrammar
from rcagent.harnesses.sqlbox import QueryRefused, SqlBox
from rcagent.investigation import Investigation
from rcagent.job import TABLES
from rcagent.serving.counted import CountedModel
from rcagent.stabilizers.jsonregen import JsonRegen
from rcagent.trajectory import Trajectory

SQL_MAX, EXPLANATION_MAX, SOLUTION_MAX, PICKS = 300, 400, 300, 5
KEEP = 6            # exchanges shown whole; older ones collapse KEEP at a time


class Submitted(Exception):
    def __init__(self, diagnosis: Diagnosis):
        self.diagnosis = diagnosis


class Refused(AgentMessage):
    """An action the agent answers with an error instead of running it."""


class Repeated(Refused):
    """A query sent before, word for word: the model is in a rut."""


def schema(entities: list[str], keys: list[str], seen: set[str] = frozenset(), bounded: bool = True,
           query: bool = True, query_pattern: str = sqlgrammar.FREE) -> dict:
    """The step's action schema; `seen` (list_tables and the tables described) drops what was shown already,
    `query=False` the query tool (for one step after a repeated query); `query_pattern` is the query grammar."""
    text = {"type": "string", "minLength": 1}
    def cap(n):
        return {"maxLength": n} if bounded else {}
    tables = [t for t in TABLES if t not in seen]
    branches = [
        *([action_branch("list_tables", {}, [], bounded)] if "list_tables" not in seen else []),
        *([action_branch("table_schema", {"table": {"type": "string", "enum": tables}}, ["table"], bounded)]
          if tables else []),
        *[action_branch("query", {"sql": {"type": "string", "pattern": query_pattern} if bounded
                                else {**text, "minLength": 6}}, ["sql"], bounded)][:int(query)],
        action_branch("submit", {
            "root_causes": {"type": "array", "items": {"type": "string", "enum": entities}, "minItems": 1,
                            **({"maxItems": PICKS} if bounded else {})},
            "explanation": {**text, **cap(EXPLANATION_MAX)}, "solution": {**text, **cap(SOLUTION_MAX)}},
            ["root_causes", "explanation", "solution"], bounded)]
    if keys or not bounded:
        branches.insert(-1, action_branch("read_snapshot", {"key": {"type": "string", "enum": keys}}, ["key"], bounded))
    return {"anyOf": branches}


class SqlAgent:
    def __init__(self, job, backend, store, settings, progress=None):
        self.job, self.backend, self.store, self.settings = job, backend, store, settings
        self.model = CountedModel(backend, store, settings)
        self.trajectory = Trajectory(store, settings.sql_max_steps, progress)
        self.inv = Investigation(job, {})         # snapshot pages shown (OBSK)
        self.parse = JsonRegen(None, 0)           # strict, then json-repair
        self.queries: dict[str, int] = {}         # normalized query -> the step it was sent at
        self.answered = False                     # a query has returned a result
        self.seen: set[str] = set()               # list_tables and the tables described: shown once
        self.repeated = False                     # the last step repeated a query
        self.offered: set[str] = set()            # the actions this step's schema offers
        self.head: list[dict] = []
        self.exchanges: list[tuple[list[dict], str]] = []   # (assistant + user messages, one-line summary)
        grammar = settings.sql_grammar
        self.query_pattern = sqlgrammar.pattern(grammar, [t for t in TABLES if job.rows.get(t)],
                                                sqlgrammar.job_dates(job))
        self.examples = prompts.render(f"sql_examples_{grammar}", start=f"{job.window.start:%Y-%m-%d %H:%M:%S}",
                                       end=f"{job.window.end:%Y-%m-%d %H:%M:%S}")

    def run(self, deadline: float | None = None, cancel: threading.Event | None = None) -> Diagnosis:
        start, s = time.perf_counter(), self.settings
        with self.store.run(self.job, self.backend, {"mode": "sql", "max_steps": s.sql_max_steps, "rows": s.sql_rows,
                                                     "query_timeout_s": s.sql_timeout_s, "grammar": s.sql_grammar,
                                                     "seed": s.seed, "temperature": s.temperature,
                                                     "ranking": s.ranking},
                            mode="sql") as record:
            self.trajectory.run_id = record.id
            self.box = SqlBox(self.job, s.sql_rows, s.sql_timeout_s)
            self.head = [
                {"role": "system", "content": prompts.render("sql_system", rows=s.sql_rows, max_steps=s.sql_max_steps,
                                                             examples=prompts.ours(self.examples))},
                {"role": "user", "content": prompts.render("sql_task", job_id=self.job.id, alert=self.job.alert,
                                                           summary=prompts.data(self.job.summary()))}]
            try:
                diagnosis = self.loop(record.id, deadline, cancel)
            finally:
                self.box.close()
            diagnosis.mode = "sql"
            self.trajectory.fill(diagnosis)
            self.model.fill(diagnosis, time.perf_counter() - start)
            record.status = "finalized" if diagnosis.finalized else "step_limit"
            record.diagnosis = diagnosis.to_dict()
        return diagnosis

    def loop(self, run_id: str, deadline, cancel) -> Diagnosis:
        while self.trajectory.step < self.settings.sql_max_steps:
            if cancel is not None and cancel.is_set():
                raise KeyboardInterrupt
            if deadline is not None and time.monotonic() > deadline:
                raise TimeLimit(f"no answer after {self.trajectory.step} steps: the time limit ran out")
            try:
                self.do_step(run_id)
            except Submitted as done:
                return done.diagnosis
        return conclusion.best_effort(self.job, run_id, [], "the step limit was reached before submit")

    def messages(self) -> list[dict]:
        old = max(0, len(self.exchanges) // KEEP - 1) * KEEP
        out = list(self.head)
        if old:
            lines = [prompts.message("sql_earlier")] + [summary for _, summary in self.exchanges[:old]]
            out.append({"role": "user", "content": lines[0] + "\n" + prompts.data("\n".join(lines[1:]))})
        for pair, _ in self.exchanges[old:]:
            out += pair
        return out

    def do_step(self, run_id: str) -> None:
        t = self.trajectory
        t.step += 1
        keys = [k for k in self.inv.pages if k not in self.inv.read_to_the_end()]
        repeated, self.repeated = self.repeated, False
        messages = self.messages()
        step_schema = schema(sorted(self.job.entities), keys, self.seen, query=not repeated,
                             query_pattern=self.query_pattern)
        if t.step == self.settings.sql_max_steps:    # the last call: only submit is left
            messages.append({"role": "user", "content": prompts.message("sql_last_step")})
            step_schema = step_schema["anyOf"][-1]
        elif not self.answered and not repeated:     # no submit before a query saw the data (or the model is
            # stuck repeating one that fails: then submitting is one way out)
            step_schema = {"anyOf": step_schema["anyOf"][:-1]}
        completion = self.ask(messages, step_schema)
        tool_start = time.perf_counter()
        action, rounds = None, []
        try:
            action, rounds = self.parse(completion.text)
            try:
                observation = self.act(action, run_id)
            except Repeated as rut:
                if not (self.settings.constrain and self.settings.schema_limits):
                    raise
                # the rut rule at once, in this step: asked again without the query tool (a repair, counted)
                rounds = [*rounds, {"round": len(rounds) + 1, "method": "repeated query", "ok": False,
                                    "error": str(rut), "text": completion.text[:300]}]
                echo = [{"role": "assistant", "content": json.dumps(action.to_dict())},
                        {"role": "user", "content": prompts.render("error", error=str(rut))}]
                completion = self.ask(messages + echo, schema(sorted(self.job.entities), keys, self.seen,
                                                              query=False))
                action, again = self.parse(completion.text)
                rounds.append({**again[-1], "round": len(rounds) + 1, "method": "asked again"})
                observation = self.act(action, run_id)
                self.repeated = False     # out of the rut already: the next step may query again
        except Submitted:
            t.save(action, completion, rounds, tool_start, observation="(submitted)")
            raise
        except AgentMessage as msg:
            rounds = [*rounds, *msg.rounds] if isinstance(msg, FormatError) else rounds
            echo = json.dumps(action.to_dict()) if action else completion.text[:300]
            error = prompts.render("error", error=str(msg))
            self.exchanges.append(([{"role": "assistant", "content": echo}, {"role": "user", "content": error}],
                                   f"step {t.step}: {echo[:120]} -> error: {str(msg)[:100]}"))
            t.save(action, completion, rounds, tool_start, valid=0, error=str(msg),
                   handler="format" if action is None else "sql")
            return
        head, key = snapshots.shorten(self.store, run_id, t.step, action.name, observation, self.inv,
                                      self.settings.snapshot_threshold, self.settings.head_chars)
        said = json.dumps(action.to_dict())
        first = next((line for line in observation.splitlines() if line.strip()), "")
        self.exchanges.append(([{"role": "assistant", "content": said},
                                {"role": "user", "content": prompts.render("observation", step=t.step,
                                                                           max_steps=self.settings.sql_max_steps,
                                                                           observation=prompts.data(head))}],
                               f"step {t.step}: {action.name} {json.dumps(action.arguments)[:160]} -> {first[:100]}"))
        t.save(action, completion, rounds, tool_start, observation=head, snapshot=key)

    def ask(self, messages: list[dict], step_schema: dict):
        """One model call under the step's schema; the actions it offers are what act() accepts."""
        self.offered = {b["properties"]["action"]["enum"][0] for b in step_schema.get("anyOf", [step_schema])}
        return self.model.query(messages, step_schema if self.settings.constrain else None)

    def act(self, action: Action, run_id: str) -> str:
        args_schema = branch(schema(sorted(self.job.entities), list(self.inv.pages), bounded=False), action.name)
        if args_schema is None:
            raise Refused(prompts.message("sql_bad_action", problem=f"unknown tool '{action.name}'"))
        if action.name == "submit":
            if "submit" not in self.offered:
                raise Refused(prompts.message("sql_blind_submit"))
            self.submit(action, run_id)
        if action.name == "query" and "query" not in self.offered:
            raise Refused(prompts.message("sql_rut"))
        errors = list(jsonschema.Draft202012Validator(args_schema).iter_errors(action.arguments))
        if errors:
            problem = f"{action.name}: {errors[0].message[:200]}"
            raise Refused(prompts.message("sql_bad_action", problem=problem))
        if action.name in ("list_tables", "table_schema"):
            what = action.arguments.get("table", action.name)
            if what in self.seen:
                raise Refused(prompts.message("sql_shown", what=what))
            self.seen.add(what)
        if action.name == "list_tables":
            return self.box.tables()
        if action.name == "read_snapshot":
            return snapshots.read(self.store, run_id, self.inv, action.arguments["key"], None, self.settings.head_chars)
        try:
            if action.name == "table_schema":
                return self.box.schema(action.arguments["table"])
            sql = " ".join(action.arguments["sql"].split()).rstrip(";")
            if sql in self.queries:
                self.repeated = True      # a rut: the next step offers everything but query
                raise Repeated(prompts.message("sql_repeated", step=self.queries[sql]))
            self.queries[sql] = self.trajectory.step
            result = self.box.run(sql)
            self.answered = True
            return result
        except QueryRefused as exc:
            raise Refused(str(exc)) from None

    def submit(self, action: Action, run_id: str) -> None:
        """End the run with the answer's inventory names (resolved as the tools resolve them)."""
        raw = action.arguments.get("root_causes")
        names = conclusion.inventory_names(self.job, raw, PICKS)
        if not names:
            raise Refused(prompts.message("sql_unknown_entities", names=json.dumps(raw)[:200]))
        args = {"root_cause": action.arguments.get("explanation"), "solution": action.arguments.get("solution")}
        raise Submitted(conclusion.conclude(self.job, run_id, names, args, self.settings.ranking,
                                               self.settings.model_vote))


def analyze(job, backend, store, settings, progress=None, deadline: float | None = None,
            cancel: threading.Event | None = None) -> Diagnosis:
    return SqlAgent(job, backend, store, settings, progress).run(deadline, cancel)
