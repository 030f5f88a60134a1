"""`rcagent batch --engine ray`: each job a Ray task, the results streamed back to the one JSONL file.

The driver (the `rcagent batch` process) decides which jobs run (`--resume` as without Ray), submits one
task per job and writes each task's line as it finishes, with the same write (flush and fsync), the same
progress bar and the same line format as the local engine. What moves and what does not:
- **Jobs are read from a shared path**, not shipped: a task carries the job folder's path, and every node
  must see the jobs at that path (one machine, or a shared filesystem). A job is tens of megabytes of
  Parquet; shipping it with each task would cost more than most baselines take to run.
- **Results come back to the driver** (one line each, a few kilobytes), so only the driver writes the
  results file: no two processes append to it.
- **The store is the node's own**: a task on the driver's node writes its run to `--store`; a task on
  another node to `<store>-<node id>.db` beside it, so no SQLite file is shared between machines (SQLite's
  locking is not safe over network filesystems).
- **A lost worker**: Ray runs the task again (`RETRIES` times); a job that still fails gets an `error` line,
  which `--resume` runs again. A line is written only when its task returned, so no job is written twice.
- **Models**: the local backend loads its model once per worker process; with `--backend openai`, a
  base URL on loopback means each node's own server (one vLLM per GPU node).
Without `--engine ray` nothing here is imported; Ray is the optional extra `ray`.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path

from rcagent.batch import AGENT_METHODS, Batch, Outcome
from rcagent.errors import BadInput

RETRIES = 3          # runs of a task after its worker died, before its job is recorded as an error
_WORKER_BATCH: dict = {}   # per worker process: the Batch (and so the backend and store) its tasks reuse


def _node_store(store: str, node_id: str) -> str:
    path = Path(store).expanduser()
    return str(path.with_name(f"{path.stem}-{node_id[:12]}{path.suffix or '.db'}"))


def run_task(method: str, settings, out: str, timeout, seed: int, job_dir: str, job_id: str,
             driver_node: str) -> dict:
    """One job, in a Ray worker: its result line (the job's own failures are in the line, as locally)."""
    import ray

    node = ray.get_runtime_context().get_node_id()
    if node != driver_node and method in AGENT_METHODS:
        settings = dataclasses.replace(settings, store=_node_store(settings.store, node))
    key = (method, repr(settings), out, timeout, seed)
    if key not in _WORKER_BATCH:
        _WORKER_BATCH.clear()
        _WORKER_BATCH[key] = Batch([], Path(out), method, settings, timeout=timeout, seed=seed)
    batch = _WORKER_BATCH[key]
    batch.ids = {Path(job_dir): job_id}
    return batch.result(Path(job_dir)).line


def _reachable(address: str, timeout_s: float = 5.0) -> None:
    """A TCP connection to the cluster's address, first: `ray.init` waits minutes for an address where
    nothing listens (measured: over ten), a wrong port should be one line at once."""
    import socket

    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise BadInput(f"--address {address}: expected HOST:PORT (the head's GCS port, 6379 by default)")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s).close()
    except OSError as exc:
        raise BadInput(f"--address {address}: cannot join the Ray cluster (nothing answers there: "
                       f"{exc.strerror or exc})") from None


class RayBatch(Batch):
    """A Batch whose jobs run as Ray tasks, on a running cluster (`address`) or on a local one started for
    this batch (`num_cpus` workers; default: the machine's CPUs)."""

    def __init__(self, *args, address: str | None = None, num_cpus: int | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.address, self.num_cpus = address, num_cpus

    def run(self) -> list[Outcome]:
        try:
            import ray
        except ImportError:
            raise BadInput("--engine ray needs Ray: pip install 'rcagent[ray]'") from None
        if self.method in AGENT_METHODS and self.jobs:
            from rcagent.store import Store

            Store(self.settings.store_path())   # created and migrated once, before the tasks
        if self.address:
            _reachable(self.address)
        started = not ray.is_initialized()
        if started:
            try:
                ray.init(address=self.address, num_cpus=None if self.address else self.num_cpus,
                         include_dashboard=False, log_to_driver=False, configure_logging=False)
            except (ConnectionError, ValueError, RuntimeError) as exc:
                raise BadInput(f"--address {self.address}: cannot join the Ray cluster "
                               f"({str(exc).strip().splitlines()[0][:160] if str(exc).strip() else type(exc).__name__})") from None
        try:
            return self._run(ray)
        finally:
            if started:
                ray.shutdown()

    def _run(self, ray) -> list[Outcome]:
        driver = ray.get_runtime_context().get_node_id()
        task = ray.remote(num_cpus=1, max_retries=RETRIES)(run_task)
        pending = {task.remote(self.method, self.settings, str(self.out), self.timeout, self.seed, str(job),
                               self.ids.get(job, job.name), driver): job for job in self.jobs}
        outcomes = []
        try:
            while pending:
                done, _ = ray.wait(list(pending), num_returns=1)
                job = pending.pop(done[0])
                try:
                    line = ray.get(done[0])
                    outcome = Outcome(line["job"], line["status"], line.get("wall_s") or 0.0, line)
                except ray.exceptions.RayError as exc:    # the worker was lost more often than it was retried
                    outcome = self.failed(job, f"{type(exc).__name__}: {str(exc).strip().splitlines()[0][:200]}")
                self.write(outcome.line)
                outcomes.append(outcome)
                self.on_done(outcome)
        except KeyboardInterrupt:
            for ref in pending:
                ray.cancel(ref, force=True)
            self.lock.acquire()        # no line after this: the file holds complete lines for --resume
            self.mark_interrupted()
            raise
        return outcomes
