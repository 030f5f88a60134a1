"""Progress on stderr for long loops (batch jobs, imports, judge calls): a rich progress bar with ETA on a
terminal, plain lines otherwise."""
from __future__ import annotations

import sys
import time

from rich.console import Console
from typing import Callable

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn


class BatchProgress:
    def __init__(self, total: int, quiet: bool = False, what: str = "jobs"):
        self.total, self.quiet, self.done, self.start, self.what = total, quiet, 0, time.monotonic(), what
        self.bar: Progress | None = None
        if not quiet and sys.stderr.isatty() and total:
            self.bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(),
                                console=Console(stderr=True))
            self.task = self.bar.add_task(what, total=total)

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

    def tick(self) -> None:
        """One more item done, with nothing to say about it: a plain line every tenth item and at the end."""
        self.done += 1
        if self.bar:
            self.bar.update(self.task, advance=1)
        elif not self.quiet and (self.done % 10 == 0 or self.done == self.total):
            print(f"  {self.done}/{self.total} {self.what}", file=sys.stderr, flush=True)


def counter(what: str) -> Callable[[int, int], None]:
    """A progress callback `(i, n)` for a loop that learns its length as it goes (an import, the judge)."""
    state: dict = {}

    def step(i: int, n: int) -> None:
        if "bar" not in state:
            state["bar"] = BatchProgress(n, what=what).__enter__()
        state["bar"].tick()
        if i == n:
            state.pop("bar").__exit__(None, None, None)
    return step
