"""The SQLite store (sqlite-utils): runs, steps, OBSK snapshots, sampled finalizations and the model-call
cache, with migrations.

Every step is written as soon as it happens, so an interrupted run stays in the store (status
'interrupted') and `rcagent show` can replay any run.
"""
from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import socket
import sqlite3
import threading
import urllib.parse
import uuid
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import sqlite_utils

from rcagent.errors import BadInput, TimeLimit


def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="milliseconds")


def _m001_initial(db: sqlite_utils.Database) -> None:
    db["runs"].create({
        "id": str, "job": str, "job_path": str, "backend": str, "model": str, "mode": str,
        "status": str, "started": str, "ended": str, "settings": str, "diagnosis": str,
    }, pk="id")
    db["steps"].create({
        "run_id": str, "step": int, "thought": str, "action": str, "arguments": str, "observation": str,
        "snapshot": str, "raw": str, "valid": int, "error": str, "prompt_tokens": int,
        "completion_tokens": int, "model_ms": float, "tool_ms": float, "created": str,
    }, pk=("run_id", "step"), foreign_keys=[("run_id", "runs", "id")])
    db["snapshots"].create({
        "run_id": str, "key": str, "step": int, "tool": str, "text": str, "chars": int, "created": str,
    }, pk=("run_id", "key"))
    db["llm_cache"].create({
        "key": str, "backend": str, "model": str, "request": str, "response": str, "created": str,
    }, pk="key")


def _m002_stabilizers(db: sqlite_utils.Database) -> None:
    # which error handler rejected a step, and JsonRegen's repair rounds (JSON) when the output needed repair
    db["steps"].add_column("handler", str)
    db["steps"].add_column("repairs", str)


def _m003_experts(db: sqlite_utils.Database) -> None:
    # what an expert tool reported on its step (JSON), e.g. {"clusters": 5, "kept": 1, "discarded": 2}
    db["steps"].add_column("expert", str)


def _m004_samples(db: sqlite_utils.Database) -> None:
    # self-consistency: each finalization sampled from the greedy prefix, kept or dropped (and why)
    db["samples"].create({
        "run_id": str, "idx": int, "raw": str, "dropped": str, "diagnosis": str, "prompt_tokens": int,
        "completion_tokens": int, "model_ms": float, "created": str,
    }, pk=("run_id", "idx"), foreign_keys=[("run_id", "runs", "id")])


def _m005_span_agents(db: sqlite_utils.Database) -> None:
    # span mode: each span agent's output, per phase (self_state, consolidate)
    db["span_agents"].create({
        "run_id": str, "span_id": str, "phase": str, "output": str, "ms": float, "created": str,
    }, pk=("run_id", "span_id", "phase"), foreign_keys=[("run_id", "runs", "id")])


def _m006_owner(db: sqlite_utils.Database) -> None:
    # the process that runs a run: a run left 'running' by a process that is gone was interrupted
    db["runs"].add_column("pid", int)
    db["runs"].add_column("host", str)


def _m007_graph_walk(db: sqlite_utils.Database) -> None:
    # graph mode: every event of the coordinator's walk (visit, verify, move, backtrack, stop), in order
    db["graph_walk"].create({
        "run_id": str, "seq": int, "step": int, "kind": str, "node": str, "detail": str, "created": str,
    }, pk=("run_id", "seq"), foreign_keys=[("run_id", "runs", "id")])


def _m008_redactions(db: sqlite_utils.Database) -> None:
    # what redaction replaced in a run's job: placeholder -> the original value, for the operator only
    db["redactions"].create({"run_id": str, "placeholder": str, "kind": str, "value": str},
                            pk=("run_id", "placeholder"), foreign_keys=[("run_id", "runs", "id")])


MIGRATIONS = [("001_initial", _m001_initial), ("002_stabilizers", _m002_stabilizers), ("003_experts", _m003_experts),
              ("004_samples", _m004_samples), ("005_span_agents", _m005_span_agents), ("006_owner", _m006_owner),
              ("007_graph_walk", _m007_graph_walk), ("008_redactions", _m008_redactions)]


def migrate(db: sqlite_utils.Database) -> None:
    if "_migrations" not in db.table_names():
        db["_migrations"].create({"name": str, "applied": str}, pk="name")
    done = {r["name"] for r in db["_migrations"].rows}
    for name, fn in MIGRATIONS:
        if name not in done:
            fn(db)
            db["_migrations"].insert({"name": name, "applied": _now()})


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@dataclass
class RunRecord:
    """The run being stored: set `status` and `diagnosis` before the `with` block of Store.run ends."""
    id: str
    status: str = "finalized"
    diagnosis: dict | None = None


class Store:
    """The store at `path`. Commands that write runs open it with `create=True` (the default): the file and
    its folder are made, migrations run, and runs left 'running' by a process that is gone are marked
    interrupted. Commands that only read (show, runs) pass `create=False`: a missing store is an error,
    never a new file. A file that is not a usable store is a BadInput naming it."""

    def __init__(self, path: str | Path, create: bool = True):
        path = Path(path)
        self.path = path
        self.write_lock = threading.RLock()
        try:
            if str(path) == ":memory:":
                conn = sqlite3.connect(":memory:", check_same_thread=False)
            elif create:
                path.parent.mkdir(parents=True, exist_ok=True)
                # span mode's agents share one store across threads: one connection, every use under write_lock
                conn = sqlite3.connect(str(path), check_same_thread=False)
            else:
                if not path.is_file():
                    raise BadInput(f"{path}: no store there (analyze and batch create one; see --store)")
                uri = f"file:{urllib.parse.quote(str(path.resolve()))}?mode=ro"
                conn = sqlite3.connect(uri, uri=True, check_same_thread=False)
            self.db = sqlite_utils.Database(conn)
            if create:
                # fail now, not after the run, when the store cannot be written (read-only, locked)
                conn.execute("PRAGMA busy_timeout = 5000")
                conn.execute("BEGIN IMMEDIATE")
                conn.execute("ROLLBACK")
                self.db.conn.execute("PRAGMA journal_mode=WAL")
                migrate(self.db)
                self.mark_abandoned()
            elif "runs" not in self.db.table_names():
                raise BadInput(f"{path}: not an rcagent store (it has no runs table)")
            # batch workers each hold a connection: wait for another's write instead of failing at once
            conn.execute("PRAGMA busy_timeout = 30000")
        except sqlite3.DatabaseError as exc:
            raise BadInput(f"{path}: cannot use this store ({exc})") from None
        except OSError as exc:
            raise BadInput(f"{path}: cannot create the store ({exc.strerror or exc})") from None

    def mark_abandoned(self) -> int:
        """Runs left 'running' by a process of this machine that no longer exists: mark them interrupted."""
        host = socket.gethostname()
        stale = [r["id"] for r in self.db["runs"].rows_where("status = 'running'", select="id, pid, host")
                 if r["pid"] is None or (r["host"] == host and not _alive(r["pid"]))]
        for run_id in stale:
            self.db["runs"].update(run_id, {"status": "interrupted", "ended": _now()})
        return len(stale)

    # ---- runs and steps --------------------------------------------------------------------------
    def start_run(self, job: str, job_path: str, backend: str, model: str, settings: dict,
                  mode: str = "react") -> str:
        run_id = uuid.uuid4().hex[:12]
        with self.write_lock:
            self.db["runs"].insert({"id": run_id, "job": job, "job_path": job_path, "backend": backend,
                                    "model": model, "mode": mode, "status": "running", "started": _now(),
                                    "settings": json.dumps(settings, default=str), "pid": os.getpid(),
                                    "host": socket.gethostname()})
        return run_id

    def end_run(self, run_id: str, status: str, diagnosis: dict | None = None) -> None:
        self.db["runs"].update(run_id, {"status": status, "ended": _now(),
                                        "diagnosis": json.dumps(diagnosis) if diagnosis else None})

    def add_step(self, run_id: str, step: int, **fields) -> None:
        if "arguments" in fields and not isinstance(fields["arguments"], str):
            fields["arguments"] = json.dumps(fields["arguments"])
        self.db["steps"].insert({"run_id": run_id, "step": step, "created": _now(), **fields}, replace=True)

    @contextmanager
    def run(self, job, backend, settings: dict, mode: str = "react") -> Iterator["RunRecord"]:
        """A run's start and end bookkeeping: the run is stored as running; it ends with the status and
        diagnosis set on the record, or as interrupted (Ctrl-C, a cancelled batch), timeout (TimeLimit) or
        failed (any other exception), which is re-raised."""
        record = RunRecord(self.start_run(job.id, str(job.path), backend.name, backend.model, settings, mode))
        self.add_redactions(record.id, getattr(job, "redactor", None))
        try:
            yield record
        except KeyboardInterrupt:
            self.end_run(record.id, "interrupted")
            raise
        except TimeLimit:
            self.end_run(record.id, "timeout")
            raise
        except BaseException:
            self.end_run(record.id, "failed")
            raise
        redactor = getattr(job, "redactor", None)
        if record.diagnosis is not None and redactor is not None:
            record.diagnosis["redacted"] = redactor.counts()
        if record.diagnosis is not None and hasattr(job, "warnings"):   # how the job was read, for the run's page
            record.diagnosis["warnings"] = job.warnings()
        self.end_run(record.id, record.status, record.diagnosis)

    def add_redactions(self, run_id: str, redactor) -> None:
        if redactor is None or not redactor.mapping:
            return
        with self.write_lock:
            self.db["redactions"].insert_all(
                ({"run_id": run_id, "placeholder": p, "kind": kind, "value": value}
                 for value, (p, kind) in redactor.mapping.items()), replace=True)

    def redactions(self, run_id: str) -> list[dict]:
        if "redactions" not in self.db.table_names():    # a store from before redaction, opened read-only
            return []
        return list(self.db["redactions"].rows_where("run_id = ?", [run_id], order_by="rowid",
                                                     select="placeholder, kind, value"))

    def get_run(self, run_id: str) -> dict | None:
        # a prefix is compared as text, not as a LIKE pattern (`%` is no wildcard here)
        rows = list(self.db["runs"].rows_where("id = ? OR substr(id, 1, length(?)) = ?",
                                               [run_id, run_id, run_id], limit=2))
        return rows[0] if len(rows) == 1 else None

    def steps(self, run_id: str) -> list[dict]:
        return list(self.db["steps"].rows_where("run_id = ?", [run_id], order_by="step"))

    def add_sample(self, run_id: str, idx: int, **fields) -> None:
        if fields.get("diagnosis") is not None and not isinstance(fields["diagnosis"], str):
            fields["diagnosis"] = json.dumps(fields["diagnosis"])
        self.db["samples"].insert({"run_id": run_id, "idx": idx, "created": _now(), **fields}, replace=True)

    def samples(self, run_id: str) -> list[dict]:
        return list(self.db["samples"].rows_where("run_id = ?", [run_id], order_by="idx"))

    def add_span_agent(self, run_id: str, span_id: str, phase: str, output: dict, ms: float) -> None:
        with self.write_lock:
            self.db["span_agents"].insert({"run_id": run_id, "span_id": span_id, "phase": phase,
                                           "output": json.dumps(output, default=str), "ms": ms,
                                           "created": _now()}, replace=True)

    def span_agents(self, run_id: str) -> list[dict]:
        return list(self.db["span_agents"].rows_where("run_id = ?", [run_id], order_by="rowid"))

    def add_walk_event(self, run_id: str, seq: int, step: int, kind: str, node: str, detail: dict) -> None:
        with self.write_lock:
            self.db["graph_walk"].insert({"run_id": run_id, "seq": seq, "step": step, "kind": kind, "node": node,
                                          "detail": json.dumps(detail, default=str), "created": _now()}, replace=True)

    def walk_events(self, run_id: str) -> list[dict]:
        return list(self.db["graph_walk"].rows_where("run_id = ?", [run_id], order_by="seq"))

    def runs(self, limit: int = 20) -> list[dict]:
        return list(self.db["runs"].rows_where(order_by="started desc", limit=limit))

    # ---- OBSK snapshots -----------------------------------------------------------------------------
    def put_snapshot(self, run_id: str, step: int, tool: str, text: str) -> str:
        # Keys are short and per run (S1, S2, ...): easy for a small model to copy, and a replayed run
        # sees the same keys, so its prompts hit the model-call cache.
        n = self.db.execute("SELECT count(*) FROM snapshots WHERE run_id = ?", [run_id]).fetchone()[0]
        key = f"S{n + 1}"
        self.db["snapshots"].insert({"key": key, "run_id": run_id, "step": step, "tool": tool, "text": text,
                                     "chars": len(text), "created": _now()}, replace=True)
        return key

    def snapshot(self, run_id: str, key: str) -> str | None:
        row = self.db.execute("SELECT text FROM snapshots WHERE run_id = ? AND key = ?", [run_id, key]).fetchone()
        return row[0] if row else None

    def snapshot_keys(self, run_id: str) -> list[dict]:
        return list(self.db["snapshots"].rows_where("run_id = ?", [run_id], order_by="rowid",
                                                    select="key, step, tool, chars"))

    # ---- model-call cache -----------------------------------------------------------------------------
    @staticmethod
    def request_key(request: dict) -> str:
        return hashlib.sha256(json.dumps(request, sort_keys=True, default=str).encode()).hexdigest()

    def cached(self, request: dict) -> list[dict] | None:
        key = self.request_key(request)
        with self.write_lock:
            row = self.db.execute("SELECT response FROM llm_cache WHERE key = ?", [key]).fetchone()
        return json.loads(row[0]) if row else None

    def cache(self, request: dict, response: list[dict]) -> None:
        with self.write_lock:
            self.db["llm_cache"].insert({"key": self.request_key(request), "backend": request.get("backend"),
                                         "model": request.get("model"), "request": json.dumps(request, default=str),
                                         "response": json.dumps(response), "created": _now()}, replace=True)
