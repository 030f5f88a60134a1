"""Readers for the exports an operations team already has (OTLP, Prometheus, Loki, Jaeger, Kubernetes,
a change log), collected into one job by `rcagent job create` (rcagent/exports/assemble.py).

Each reader module (otlp, prometheus, loki, jaeger, kubernetes, changelog) has `sniff(doc) -> bool` (is
this parsed file mine?) and `read(doc, src, out)`, which appends rows to a `Collected`. What a reader
cannot use is counted in `Collected.skipped` by file and reason, and reported: never dropped silently.
A file that is not what it claims (truncated JSON, a list where the format has an object, a time in the
wrong unit) raises `ExportError`, one line naming the file and the record.
"""
from __future__ import annotations

import datetime as dt
from collections import Counter
from dataclasses import dataclass, field

from rcagent.errors import BadInput

# Plausible instants (2000-01-01 .. 2100-01-01) in seconds: a time outside them is in another unit.
EARLIEST, LATEST = 946_684_800, 4_102_444_800
COUNTERS = "counter series read as per-second rates"   # the count of them in Collected.records
JOINED = "log lines joined to the line they continue"     # stack-trace frames (rcagent/exports/multiline.py)
EXCEPTIONS = "log lines given the exception recorded beside them"   # OTLP's exception.*, ECS's error.*
UNITS = {"s": 1, "ms": 1e3, "us": 1e6, "ns": 1e9}


class ExportError(BadInput):
    """An export file that cannot be read as its format: `src: record: what is wrong`."""


@dataclass
class Source:
    """Where a record comes from, for messages: a file, and a line of it for JSON-lines files."""
    file: str
    line: int | None = None

    def at(self, record: str) -> str:
        return f"{self.file}: " + (f"line {self.line}: " if self.line else "") + record

    def error(self, record: str, what: str) -> ExportError:
        return ExportError(f"{self.at(record)}: {what}")


@dataclass
class Pod:
    """What a source says about one pod (or instance): its service and node, when it says."""
    service: str | None = None
    node: str | None = None


@dataclass
class Collected:
    """Rows of the job tables (in rcagent.job.SCHEMAS column order) and what the sources say about
    entities, gathered from every export file of one incident."""
    metrics: list[tuple] = field(default_factory=list)
    traces: list[tuple] = field(default_factory=list)
    logs: list[tuple] = field(default_factory=list)
    events: list[tuple] = field(default_factory=list)
    pods: dict[str, Pod] = field(default_factory=dict)        # pod -> service, node
    services: dict[str, str] = field(default_factory=dict)    # service -> kind (service, database, ...)
    nodes: set[str] = field(default_factory=set)
    calls: set[tuple[str, str]] = field(default_factory=set)  # caller service -> callee service
    # cumulative series, turned into rates when every file is read: (entity, series, "sum" | "histogram")
    # -> [(time, value or sum, None or count)]
    cumulative: dict[tuple[str, str, str], list[tuple]] = field(default_factory=dict)
    # series whose name says counter (Prometheus' NAME_total, _bucket, _sum, _count), judged when every file
    # is read: (entity, NAME, "{labels}" or "", suffix) -> [(time, value)]
    counters: dict[tuple[str, str, str, str], list[tuple]] = field(default_factory=dict)
    units: dict[str, str] = field(default_factory=dict)       # a cumulative histogram -> its mean's unit, "(ms)"
    files: Counter = field(default_factory=Counter)           # format -> files read
    records: Counter = field(default_factory=Counter)         # format -> records read
    skipped: Counter = field(default_factory=Counter)         # (file, reason) -> records not used

    def pod(self, name: str, service: str | None = None, node: str | None = None) -> None:
        """Record a pod, filling in its service and node where a source names them first."""
        service, node = _name(service), _name(node)
        known = self.pods.setdefault(name, Pod())
        known.service = known.service or service
        known.node = known.node or node
        if service:
            self.services.setdefault(service, "service")
        if node:
            self.nodes.add(node)

    def rates(self) -> None:
        """Turn the cumulative series into metrics: a sum's per-second increase, a histogram's mean of
        the observations in each interval and their rate. A counter reset (a fall) starts afresh.
        The series named as counters are judged first (_counters)."""
        self._counters()
        for (entity, series, kind), points in self.cumulative.items():
            points.sort(key=lambda p: p[0])
            for (t0, v0, c0), (t1, v1, c1) in zip(points, points[1:]):
                seconds = (t1 - t0).total_seconds()
                if seconds <= 0:
                    continue
                dv = v1 - v0 if v1 >= v0 else v1
                if kind == "sum":
                    self.metrics.append((t1, entity, series, dv / seconds))
                    continue
                dc = c1 - c0 if c1 >= c0 else c1
                if dc > 0:
                    self.metrics.append((t1, entity, series + ":mean" + self.units.get(series, ""), dv / dc))
                self.metrics.append((t1, entity, series + ":rate", dc / seconds))
        self.cumulative.clear()

    def _counters(self) -> None:
        """The series named as counters, as cumulative series or as they are. `_total` and `_bucket` are
        counters when they never fall but for a rare reset; `_sum` and `_count` when both come for the same
        entity and labels (a histogram's or summary's, read as its mean and rate): alone, or going up and
        down, they are gauges named so (a database exporter's `..._count` of open connections) and stay
        as they are, as does a series of one sample (no interval to take a rate over)."""
        def steady(points: list[tuple]) -> bool:
            falls = sum(b[1] < a[1] for a, b in zip(points, points[1:]))
            return len(points) > 1 and falls <= max(1, len(points) // 100)

        for key, points in self.counters.items():   # a sample two files repeat is one sample
            self.counters[key] = sorted(dict(points).items())
        for (entity, name, labels, suffix), points in self.counters.items():
            if suffix in ("_sum", "_count"):
                sums = self.counters.get((entity, name, labels, "_sum"))
                counts = self.counters.get((entity, name, labels, "_count"))
                if sums and counts and steady(sums) and steady(counts):
                    if suffix == "_sum":
                        by_time = dict(counts)
                        self.cumulative[(entity, name + labels, "histogram")] = [
                            (t, v, by_time[t]) for t, v in sums if t in by_time]
                        self.records[COUNTERS] += 2
                    continue
            elif steady(points):
                rate = (name if suffix == "_total" else name + suffix) + labels + ":rate"
                self.cumulative.setdefault((entity, rate, "sum"), []).extend((t, v, None) for t, v in points)
                self.records[COUNTERS] += 1
                continue
            self.metrics.extend((t, entity, name + suffix + labels, v) for t, v in points)
        self.counters.clear()

    def skip(self, src: Source, reason: str, n: int = 1) -> None:
        self.skipped[(src.file, reason)] += n


def _name(value) -> str | None:
    """An entity's name as a source gives it: a string, or a number written as one (a node named 7);
    anything else (an object, a list, true) names nothing."""
    if isinstance(value, str):
        return value or None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)
    return None


def instant(value, unit: str, src: Source, record: str) -> dt.datetime:
    """A number (or a numeric string, as OTLP's int64 and Loki's timestamps are) in `unit` since the
    epoch, as naive UTC; a value that is not a plausible instant in that unit is an error, since a
    file mixing units cannot be read by guessing."""
    try:
        exact = (isinstance(value, int) and not isinstance(value, bool)) or (isinstance(value, str) and value.isdigit())
        number = int(value) if exact else float(value)
    except (TypeError, ValueError):
        raise src.error(record, f"time {str(value)[:40]!r} is not a number") from None
    seconds = number / UNITS[unit]
    if not EARLIEST <= seconds <= LATEST:
        raise src.error(record, f"time {str(value)[:40]} is not in {unit} since the epoch "
                                f"(it would be {_describe(seconds)}): mixed or wrong time units")
    if isinstance(number, int) and unit != "s":   # integer arithmetic keeps nanoseconds exact
        whole, frac = divmod(number, int(UNITS[unit]))
        return dt.datetime(1970, 1, 1) + dt.timedelta(seconds=whole, microseconds=frac * 1_000_000 // int(UNITS[unit]))
    return dt.datetime(1970, 1, 1) + dt.timedelta(seconds=seconds)


def _describe(seconds: float) -> str:
    if seconds < EARLIEST:
        return "before 2000"
    return "after 2100"


def rfc3339(value, src: Source, record: str) -> dt.datetime:
    """An RFC 3339 time ('2024-05-01T10:00:00.123456789Z', or with an offset) as naive UTC; nanosecond
    digits beyond microseconds are cut."""
    if not isinstance(value, str) or not value:
        raise src.error(record, f"time {value!r} is not an RFC 3339 string")
    text = value.strip().replace("Z", "+00:00").replace("z", "+00:00")
    if "." in text:   # Python reads at most 6 fractional digits
        head, rest = text.split(".", 1)
        digits = len(rest) - len(rest.lstrip("0123456789"))
        text = f"{head}.{rest[:min(digits, 6)]}{rest[digits:]}" if digits else head + rest
    try:
        parsed = dt.datetime.fromisoformat(text)
    except ValueError:
        raise src.error(record, f"time {value[:40]!r} is not an RFC 3339 string") from None
    if parsed.tzinfo is not None:
        parsed = parsed.astimezone(dt.timezone.utc).replace(tzinfo=None)
    return parsed


def expect(value, kind: type, src: Source, record: str, what: str):
    """`value` if it is a `kind` (dict, list, str), else the error naming the record: the file is nested
    in another way than its format."""
    if not isinstance(value, kind):
        names = {dict: "an object", list: "a list", str: "a string"}
        got = "null" if value is None else type(value).__name__
        raise src.error(record, f"{what} should be {names.get(kind, kind.__name__)}, not {got}")
    return value
