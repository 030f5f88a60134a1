"""Stack traces and other records a logger writes as one but a collector ships as many lines (a container's
log file, Loki or Elasticsearch without a multiline stage), joined back into the line they belong to.

Without this, each frame of a Java stack trace is a log line of its own with no level: a hundred error-like
lines and as many templates "new in the window" for one exception, while the exception's class stands apart
from the message that logged it. The rules are those of the usual multiline stages (Logstash's `^\\s`,
Fluent Bit's java, python and go parsers):
- a line that starts with a space or a tab continues the line before (Java's `\\tat ...`, Python's
  `  File ...` and its source lines, Go's `\\t/src/main.go:12 +0x1d`);
- so do Java's `Caused by: ...`, `Suppressed: ...` and `... 12 more`, and Python's
  `Traceback (most recent call last):`;
- right after a line, an exception's own line (`java.lang.IllegalStateException: ...`, which
  `logger.error("...", e)` writes after the message) continues it; so does the line that ends a Python
  traceback (`ValueError: ...`), and Go's `goroutine 1 [running]:`, a function line and `created by ...`
  after a panic.
A line joins only the line before it from the same file and pod, written at most `GAP` later, and only
when it has no level or the same (a stream's level label gives every frame its head's level) and states
none itself: a line that says its level (`    INFO ready`, as Python's `%(levelname)8s` pads it) is a
record of its own; at most `MOST` lines make one record. The record keeps its
first line's time, level and trace id (or the first trace id a later line states).

Structured sources ship the exception beside the message instead (OTLP's `exception.stacktrace`, ECS's
`error.stack_trace`): `with_exception` appends it to the line as the logger would have written it, so a
line reads the same whichever way it came.
"""
from __future__ import annotations

import datetime as dt
import re

from rcagent.logline import level_of

GAP = dt.timedelta(seconds=1)
MOST = 500
_INDENTED = re.compile(r"^[ \t]+\S")
_CONTINUES = re.compile(r"^(Caused by: |Suppressed: |\.\.\. \d+ (more|common frames omitted)\b|"
                        r"Traceback \(most recent call last\):)")
_EXCEPTION = re.compile(r"^([a-zA-Z_$][\w$]*\.)+[A-Z][\w$]*(Exception|Error|Throwable|Fault)(: .*)?$")
_PY_END = re.compile(r"^[A-Za-z_][\w.]*(: .*)?$")
# a function line: `main.handle(0x1)`, `net/http.(*conn).serve(...)`; the name's parts have one reading each,
# so a hostile line of brackets is matched in linear time
_GO = re.compile(r"^(goroutine \d+ \[.*\]:|created by .+|[\w./-]+(\(\*?\w+\)[\w./-]*)?\(.*\))$")


def continues(text: str, record: list[str]) -> bool:
    """Does `text` continue the record whose lines so far are `record`?"""
    if _INDENTED.match(text) or _CONTINUES.match(text):
        return True
    first, last = record[0], record[-1]
    if len(record) == 1 and _EXCEPTION.match(text):
        return True
    if "Traceback (most recent call last):" in record and _INDENTED.match(last):
        return bool(_PY_END.match(text))
    if first.startswith("panic: ") or any(line.startswith("goroutine ") for line in record):
        return bool(_GO.match(text))
    return False


def with_exception(line: str, kind=None, message=None, stacktrace=None) -> tuple[str, bool]:
    """`line` with the exception recorded beside it (its stack trace, else `type: message`) on the lines
    after it, at most `MOST` lines in all, and whether anything was added: nothing when there is no
    exception or the line holds it already (an appender that writes it into the message too)."""
    text = str(stacktrace).strip("\r\n") if stacktrace not in (None, "") else ""
    if not text and kind not in (None, ""):   # a message alone is no exception: the line states its own
        text = f"{kind}: {message}" if message not in (None, "") else str(kind)
    if not text or text.splitlines()[0] in line:
        return line, False
    lines = ([line] if line else []) + text.splitlines()
    return "\n".join(lines[:MOST]), True


def join_lines(rows: list[tuple], files: list[str]) -> tuple[list[tuple], int]:
    """`rows` (time, pod, level, text, trace) with the lines that continue another joined into it, and how
    many were joined. `files[i]` names the file row i came from: lines of two files never join. Rows are
    taken per file and pod in the order of their time, and in the file's order within one time (reversed
    where the file is written newest first); a line that joins nothing is kept as it was."""
    groups: dict[tuple, list[int]] = {}
    for i, row in enumerate(rows):
        groups.setdefault((files[i], row[1]), []).append(i)
    out: list[tuple] = []
    joined = 0
    for indices in groups.values():
        times = [rows[i][0] for i in indices]
        if sum(a > b for a, b in zip(times, times[1:])) > sum(a < b for a, b in zip(times, times[1:])):
            indices.reverse()   # newest first (Loki's default direction): lines of one time too
        indices.sort(key=lambda i: rows[i][0])
        head: tuple | None = None   # the record's first row
        lines: list[str] = []       # its lines so far, without line ends
        trace, last = None, None    # its trace id, the time of its last line

        def close() -> None:
            if head is not None:
                text = head[3] if len(lines) == 1 else "\n".join(lines)
                out.append((head[0], head[1], head[2], text, trace))

        for i in indices:
            row = rows[i]
            when, _pod, level, text, row_trace = row
            text = text.rstrip("\r\n")
            if (head is not None and level in (None, head[2]) and len(lines) < MOST and when - last <= GAP
                    and continues(text, lines) and level_of(text) is None):
                lines.append(text)
                trace, last = trace or row_trace, when
                joined += 1
                continue
            close()
            head, lines, trace, last = row, [text], row_trace, when
        close()
    return out, joined
