"""The agent modes behind one call: what `analyze --mode` and `batch` run.

react: the RCAgent controller; span: RCLAgent's span mode; oneshot and sql: RCAtlas's free harnesses;
graph: the graph-augmented multi-agent walk (GAMA).
Each takes the job, the backend, the store and the settings, and returns a Diagnosis.
"""
from __future__ import annotations

import dataclasses
import threading
from pathlib import Path
from typing import Callable

from rcagent.diagnosis import Diagnosis

MODES = ("react", "span", "oneshot", "sql", "graph")


def run(job, backend, store, settings, mode: str | None = None, progress: Callable[[dict], None] | None = None,
        deadline: float | None = None, cancel: threading.Event | None = None,
        graph_dir: Path | None = None) -> Diagnosis:
    """One analysis in `mode` (default: the settings' mode). `deadline` (time.monotonic()) and `cancel` end
    a run early (stored as timeout or interrupted); `progress` gets one event per step (react and sql).
    The diagnosis reports how many distinct values redaction replaced in the job, by kind, and the job's
    warnings."""
    d = _dispatch(job, backend, store, settings, mode, progress, deadline, cancel, graph_dir)
    if getattr(job, "redactor", None) is not None:
        d.redacted = job.redactor.counts()
    d.warnings = job.warnings()
    return d


def _dispatch(job, backend, store, settings, mode, progress, deadline, cancel, graph_dir) -> Diagnosis:
    mode = mode or settings.mode
    if mode != settings.mode:
        settings = dataclasses.replace(settings, mode=mode)
    if mode == "span":
        from rcagent.spans.mode import analyze

        return analyze(job, backend, store, settings, graph_dir=graph_dir, deadline=deadline, cancel=cancel)
    if mode == "graph":
        from rcagent.graphmode.mode import analyze

        return analyze(job, backend, store, settings, graph_dir=graph_dir, deadline=deadline, cancel=cancel)
    if mode == "oneshot":
        from rcagent.harnesses.oneshot import analyze

        return analyze(job, backend, store, settings, deadline=deadline, cancel=cancel)
    if mode == "sql":
        from rcagent.harnesses.sqlagent import analyze

        return analyze(job, backend, store, settings, progress=progress, deadline=deadline, cancel=cancel)
    from rcagent.controller import Controller

    return Controller(job, backend, store, settings, progress=progress).run(deadline=deadline, cancel=cancel)
