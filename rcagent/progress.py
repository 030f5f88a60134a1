"""Batch progress on stderr: a rich progress bar with ETA on a terminal, one plain line per job otherwise."""
from __future__ import annotations

import sys
import time

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn


class BatchProgress:
    def __init__(self, total: int, quiet: bool = False):
        self.total, self.quiet, self.done, self.start = total, quiet, 0, time.monotonic()
        self.bar: Progress | None = None
        if not quiet and sys.stderr.isatty() and total:
            self.bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(),
                                console=Console(stderr=True))
            self.task = self.bar.add_task("jobs", total=total)

    def __enter__(self) -> "BatchProgress":
        if self.bar:
            self.bar.start()
        return self

    def __exit__(self, *exc) -> None:
        if self.bar:
            self.bar.stop()

    def eta(self) -> float:
        elapsed = time.monotonic() - self.start
        return elapsed / self.done * (self.total - self.done) if self.done else 0.0

    def advance(self, outcome) -> None:
        self.done += 1
        if self.quiet:
            return
        line = f"{outcome.job:<14} {outcome.status:<10} {outcome.wall_s:6.1f} s"
        if self.bar:
            self.bar.console.print(line, highlight=False)
            self.bar.update(self.task, advance=1)
        else:
            print(f"[{self.done}/{self.total}] {line}  ETA {self.eta() / 60:.1f} min", file=sys.stderr, flush=True)
