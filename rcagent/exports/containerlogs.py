"""Container log files (`.log`), as a node or `kubectl` leaves them: the log lines of a pod whose logs
never went to Loki or a collector.

Three line formats, recognised per line:
- CRI (containerd, CRI-O; `/var/log/pods`, `/var/log/containers`): `TIME STREAM P|F MESSAGE`, the parts
  of a long line (`P`) joined up to its last (`F`);
- Docker's json-file driver: `{"log": "...\\n", "stream": "stdout", "time": "..."}`, the parts of a long
  line (no newline at the end of `log`) joined likewise;
- `kubectl logs --timestamps POD > POD.log`: `TIME MESSAGE`.
A line with no time at its start (`kubectl logs` without `--timestamps`) cannot be placed in the window: it
is counted as skipped, with that remedy.

The pod comes from the file's path: `/var/log/containers/POD_NAMESPACE_CONTAINER-ID.log`,
`/var/log/pods/NAMESPACE_POD_UID/CONTAINER/N.log`, else the file's name (`POD.log`). The kubelet's rotated
files are read too (`N.log.20240501-101010`, and gzip-compressed `....gz`): an incident's lines are often
in them. A line's level and trace id are those it states itself (rcagent.logline).
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from rcagent.exports import Collected, Source, rfc3339
from rcagent.logline import described

LOG_NAME = re.compile(r"\.log(\.\d{8}-\d{6})?(\.gz)?$", re.I)   # N.log, rotated N.log.DATE-TIME, compressed
_CONTAINERS = re.compile(r"^(?P<pod>[^_]+)_(?P<ns>[^_]+)_(?P<container>.+)-[0-9a-f]{64}$")
_PODS_DIR = re.compile(r"^(?P<ns>[^_]+)_(?P<pod>[^_]+)_[0-9a-f-]{36}$")
_CRI = re.compile(r"^(\d{4}-\d\d-\d\dT\S+) (stdout|stderr) ([PF]) ?(.*)$")
_STAMPED = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:[Zz]|[+-]\d\d:\d\d)) ?(.*)$")
NO_TIME = "log line with no RFC 3339 time at its start (from kubectl logs: add --timestamps)"


@dataclass
class LogFile:
    """A `.log` file's lines, for the reader below (assemble.documents makes one per file)."""
    path: Path
    lines: list[str]


def is_log_file(path: Path) -> bool:
    return bool(LOG_NAME.search(path.name))


def pod_of(path: Path) -> str:
    """The pod a container log file belongs to, by the kubelet's naming, else the file's name."""
    stem = LOG_NAME.sub("", path.name)
    m = _CONTAINERS.match(stem)
    if m:
        return m.group("pod")
    if len(path.parents) > 1:
        m = _PODS_DIR.match(path.parent.parent.name)
        if m and stem.isdigit():
            return m.group("pod")
    return stem if not stem.isdigit() else path.parent.name


def sniff(doc) -> bool:
    return isinstance(doc, LogFile)


def read(doc: LogFile, src: Source, out: Collected) -> None:
    pod = pod_of(doc.path)
    out.pod(pod)
    pending: dict[str, tuple] = {}     # stream -> (time, parts) of a line still in parts
    kept = 0

    def emit(when, text: str) -> None:
        nonlocal kept
        text = text.rstrip("\r\n")
        level, trace = described(text)
        out.logs.append((when, pod, level, text, trace))
        kept += 1

    def part(stream: str, at: Source, time_text: str, text: str, last: bool) -> None:
        """One part of a line: the line is emitted, at the time of its first part, with its last."""
        when, parts = pending.pop(stream, None) or (rfc3339(time_text, at, "time"), [])
        parts.append(text)
        if last:
            emit(when, "".join(parts))
        else:
            pending[stream] = (when, parts)

    for n, raw in enumerate(doc.lines, 1):
        if not raw.strip():
            continue
        at = Source(src.file, n)
        if raw.startswith("{"):
            try:
                entry = json.loads(raw)
            except ValueError:
                entry = None
            if isinstance(entry, dict) and isinstance(entry.get("log"), str) and "time" in entry:
                part(str(entry.get("stream") or "stdout"), at, entry["time"], entry["log"], entry["log"].endswith("\n"))
                continue
        m = _CRI.match(raw)
        if m:
            part(m.group(2), at, m.group(1), m.group(4), m.group(3) == "F")
            continue
        m = _STAMPED.match(raw)
        if m:
            emit(rfc3339(m.group(1), at, "time"), m.group(2))
            continue
        out.skip(src, NO_TIME)
    for when, parts in pending.values():   # a file cut in the middle of a long line
        emit(when, "".join(parts))
    out.records["container log lines"] += kept
