"""Batch runs: one diagnosis per job, appended to a JSONL file as each job finishes.

Every method (the agent or a baseline) writes the same line: the analyze JSON plus the method, the job's
path and system, and a status: answered, unanswered (no root cause), timeout or error. Lines are flushed as
they are written, so a crash loses only the jobs in flight; `resume` skips the jobs that already have a
line (errors are retried, a broken last line is dropped). Jobs run in a thread pool: against an
OpenAI-compatible server the requests overlap (vLLM batches them); the local backend gets one model copy
per worker.
"""
from __future__ import annotations

import fcntl
import json
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from rcagent.eval.baselines import METHODS, run_baseline
from rcagent.config import Settings
from rcagent.diagnosis import Diagnosis
from rcagent.errors import BadInput, TimeLimit

AGENT_METHODS = ("react", "span", "oneshot", "sql", "graph")   # the agent's modes (rcagent.modes; batch --mode)


def methods() -> tuple[str, ...]:
    return AGENT_METHODS + tuple(METHODS)


@dataclass
class Outcome:
    job: str
    status: str
    wall_s: float
    line: dict


def read_results(path: Path, strict: bool = False) -> list[dict]:
    """The result lines of a JSONL file; a line that does not parse (a crash mid-write) is skipped. With
    `strict` (eval), a line that parses but has wrong types is a BadInput naming the file and the line."""
    from rcagent.validate import ResultLine, check

    rows = []
    if path.is_file():
        try:
            text = path.read_text(encoding="utf-8", errors="strict")
        except UnicodeDecodeError as exc:
            raise BadInput(f"{path}: not UTF-8 text (byte {exc.start})") from None
        except OSError as exc:
            raise BadInput(f"{path}: cannot read ({exc.strerror or exc})") from None
        for number, raw in enumerate(text.splitlines(), 1):
            try:
                row = json.loads(raw)
            except (json.JSONDecodeError, RecursionError):
                continue
            if not isinstance(row, dict) or not row.get("job"):
                continue
            if strict:
                row = check(ResultLine, row, f"{path}: line {number}").model_dump(exclude_none=True)
            rows.append(row)
    return rows


def job_ids(jobs: list[Path]) -> dict[Path, str]:
    """Each job folder's id (from its job.yaml, validated); two folders with one id are refused, since the
    results and the labels are keyed by it."""
    from rcagent.job import read_meta

    ids: dict[Path, str] = {}
    seen: dict[str, Path] = {}
    for job in jobs:
        job_id = read_meta(job).id
        if job_id in seen:
            raise BadInput(f"{job} and {seen[job_id]} both have the job id {job_id!r}: results could not be told apart")
        seen[job_id] = job
        ids[job] = job_id
    return ids


class OutputLock:
    """Hold an exclusive lock on `<out>.lock` while a batch writes `out`: a second batch on the same file
    is refused instead of running every job twice. The lock goes with the process (flock)."""

    def __init__(self, out: Path):
        self.path = out.with_name(out.name + ".lock")
        self.handle = None

    def __enter__(self) -> "OutputLock":
        try:
            self.handle = self.path.open("a")
            fcntl.flock(self.handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self.handle.close()
            raise BadInput(f"another batch is writing {self.path.with_suffix('')} (it holds {self.path}); "
                           "wait for it to finish or choose another --out") from None
        except OSError as exc:
            raise BadInput(f"{self.path}: cannot lock the results file ({exc.strerror or exc})") from None
        return self

    def __exit__(self, *exc) -> None:
        if self.handle:
            self.handle.close()


def prepare_output(path: Path, resume: bool) -> set[str]:
    """The job ids to skip. Without resume an existing non-empty file is refused; with resume the file is
    rewritten without broken lines and errored jobs, which run again."""
    if path.is_file() and path.stat().st_size and not resume:
        raise BadInput(f"{path} already holds results: pass --resume to continue it, or choose another --out")
    path.parent.mkdir(parents=True, exist_ok=True)
    kept = [r for r in read_results(path) if r.get("status") != "error"]
    if path.is_file():
        tmp = path.with_suffix(path.suffix + ".tmp")
        tmp.write_text("".join(json.dumps(r) + "\n" for r in kept))
        os.replace(tmp, path)
    return {r["job"] for r in kept}


class Batch:
    def __init__(self, jobs: list[Path], out: Path, method: str, settings: Settings, concurrency: int = 1,
                 timeout: float | None = None, seed: int = 0, on_done: Callable[[Outcome], None] | None = None,
                 backend=None, ids: dict[Path, str] | None = None):
        if method not in methods():
            raise BadInput(f"unknown method '{method}' (choose from {', '.join(methods())})")
        self.jobs, self.out, self.method, self.settings = jobs, out, method, settings
        self.concurrency, self.timeout, self.seed = max(1, concurrency), timeout, seed
        self.on_done = on_done or (lambda outcome: None)
        self.lock = threading.Lock()
        self.cancel = threading.Event()
        self.backend = backend           # one backend for every worker (an HTTP client, or a test's)
        self.ids = ids or {}             # job folder -> job id (what a failed job's line is keyed by)
        self.local = threading.local()   # per worker: its own backend (local llama.cpp) and store connection

    def run(self) -> list[Outcome]:
        outcomes = []
        if self.method in AGENT_METHODS and self.jobs:
            from rcagent.store import Store

            Store(self.settings.store_path())   # create and migrate the store once, before the workers
        pool = ThreadPoolExecutor(max_workers=self.concurrency)
        futures = [pool.submit(self.one, job) for job in self.jobs]
        try:
            for future in as_completed(futures):
                outcome = future.result()
                outcomes.append(outcome)
                self.on_done(outcome)
        except KeyboardInterrupt:
            # Jobs not started are dropped; runs in flight stop at their next step. No line is written
            # after this (the write lock is kept), so the file holds complete lines and --resume runs the
            # rest; this process's runs still running are marked interrupted now, since the caller may
            # exit without waiting for a model call in flight.
            self.cancel.set()
            pool.shutdown(wait=False, cancel_futures=True)
            self.lock.acquire()
            self.mark_interrupted()
            raise
        pool.shutdown(wait=True)
        return outcomes

    def mark_interrupted(self) -> None:
        if self.method not in AGENT_METHODS:
            return
        from rcagent.store import Store

        try:
            store = Store(self.settings.store_path())
            with store.write_lock:
                for row in store.db["runs"].rows_where("status = 'running' AND pid = ?", [os.getpid()],
                                                       select="id"):
                    store.end_run(row["id"], "interrupted")
        except Exception:  # noqa: BLE001 - stopping must not fail; the next writer marks them anyway
            pass

    def one(self, job_dir: Path) -> Outcome:
        """Diagnose one job and append its line to the results file."""
        outcome = self.result(job_dir)
        self.write(outcome.line)
        return outcome

    def result(self, job_dir: Path) -> Outcome:
        """Diagnose one job: its line (never raises for the job's own failures), not yet written."""
        from rcagent.job import Job

        start = time.perf_counter()
        extra = {"method": self.method, "job_path": str(job_dir), "system": None, "source": None}
        job = None
        try:
            job = Job.load(job_dir, redact=self.settings.redact)
            extra.update(system=job.system, source=job.source)
            diagnosis = self.diagnose(job)
            status = "answered" if diagnosis.root_causes else "unanswered"
            line, error = diagnosis.to_dict(), None
        except TimeLimit as exc:
            status, error = "timeout", str(exc)
            line = Diagnosis(job=self.ids.get(job_dir, job_dir.name), run_id="", note=error, mode=self.method).to_dict()
        except Exception as exc:  # noqa: BLE001 - one failing job must not end a batch of hundreds
            status, error = "error", f"{type(exc).__name__}: {exc}"
            line = Diagnosis(job=self.ids.get(job_dir, job_dir.name), run_id="", note=error, mode=self.method).to_dict()
        finally:
            if job is not None:
                job.con.close()      # hundreds of jobs: do not wait for the garbage collector
        wall = round(time.perf_counter() - start, 3)
        if status in ("timeout", "error"):
            line["wall_s"] = wall
        line.update(extra, status=status, error=error)
        if self.method in AGENT_METHODS and not line.get("model"):   # a run that ended without a diagnosis
            backend = getattr(self.local, "backend", None)
            line["model"] = backend.model if backend else self.settings.model
        return Outcome(line["job"], status, wall, line)

    def diagnose(self, job) -> Diagnosis:
        if self.method not in AGENT_METHODS:
            diagnosis = run_baseline(job, self.method, self.seed)
            diagnosis.warnings = job.warnings()
            return diagnosis
        from rcagent import modes
        from rcagent.serving import make_backend
        from rcagent.store import Store

        if not hasattr(self.local, "store"):
            self.local.store = Store(self.settings.store_path())
            self.local.backend = self.backend or make_backend(self.settings)
        deadline = time.monotonic() + self.timeout if self.timeout else None
        return modes.run(job, self.local.backend, self.local.store, self.settings, mode=self.method,
                         deadline=deadline, cancel=self.cancel, graph_dir=self.out.parent / f"{self.out.stem}-graphs")

    def failed(self, job_dir: Path, error: str) -> Outcome:
        """The line of a job that could not be run at all (its worker was lost)."""
        line = Diagnosis(job=self.ids.get(job_dir, job_dir.name), run_id="", note=error, mode=self.method).to_dict()
        line.update(method=self.method, job_path=str(job_dir), system=None, source=None, status="error",
                    error=error, wall_s=0.0)
        return Outcome(line["job"], "error", 0.0, line)

    def write(self, line: dict) -> None:
        with self.lock, self.out.open("a") as f:
            f.write(json.dumps(line, default=str) + "\n")
            f.flush()
            os.fsync(f.fileno())
