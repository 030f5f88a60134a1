"""`rcagent job create`: one job folder from any mix of export files (rcagent/exports/*), with its entities
and relations derived from what the data shows.

Files are read by their content, not their name: `.json` (one document, or JSON lines as the collector's
file exporter writes), `.jsonl`/`.ndjson`, `.csv` and `.yaml`/`.yml` (a change log), and `.log`, a
container's log file, with the kubelet's rotated `.log.DATE-TIME` and `.log.DATE-TIME.gz`
(rcagent/exports/containerlogs.py). A folder is read file by file (hidden files and other extensions are counted as skipped). Names are reconciled across
sources: spellings that differ only in case are one entity (the lower-case one kept), `namespace/name` is
`name` when that is an entity of another source, and a pod whose
service no source names takes it from the Kubernetes naming of its pod (`<deployment>-<hash>-<id>`,
`<statefulset>-<n>`) when that service is known. A stack trace shipped as one line per frame is joined
back into the log line it continues (rcagent/exports/multiline.py).
"""
from __future__ import annotations

import csv
import datetime as dt
import gzip
import io
import json
import re
import shutil
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import duckdb
import pyarrow as pa
import yaml

from rcagent.errors import BadInput
from rcagent.exports import (JOINED, Collected, ExportError, Source, changelog, containerlogs, elasticsearch, jaeger,
                             kubernetes, loki, otlp, prometheus, rfc3339)
from rcagent.exports.multiline import join_lines
from rcagent.importers import iso, write_folder
from rcagent.job import SCHEMAS, Job
from rcagent.validate import NoAliasLoader

READERS = {"container logs": containerlogs, "otlp": otlp, "prometheus": prometheus, "loki": loki,
           "elasticsearch": elasticsearch, "jaeger": jaeger, "kubernetes": kubernetes, "change log": changelog}
JSON_SUFFIXES = {".json", ".jsonl", ".ndjson"}
SUFFIXES = JSON_SUFFIXES | {".csv", ".yaml", ".yml", ".log"}
K8S_POD = (re.compile(r"^(?P<owner>[a-z0-9.-]+?)-[a-z0-9]{5,10}-[a-z0-9]{5}$"), re.compile(r"^(?P<owner>[a-z0-9.-]+)-\d+$"))


@dataclass
class Created:
    """What `job create` wrote: the job's folder, its rows per table, entities by kind, the files read
    per format, the records read and those skipped (by file and reason)."""
    folder: Path
    rows: dict[str, int]
    kinds: dict[str, int]
    formats: Counter
    records: Counter
    skipped: Counter
    renamed: dict[str, str] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)   # Job.warnings(): a baseline cut, unused tables


def files_of(paths: list[Path], out: Collected) -> list[tuple[Path, bool]]:
    """(file, named on the command line) for every file to read; a folder's other files are counted."""
    found = []
    for path in paths:
        if not path.exists():
            raise BadInput(f"{path}: no such file or folder")
        if path.is_file():
            found.append((path, True))
            continue
        for f in sorted(p for p in path.rglob("*") if p.is_file()):
            hidden = any(part.startswith(".") for part in f.relative_to(path).parts)
            if hidden or (f.suffix.lower() not in SUFFIXES and not containerlogs.is_log_file(f)):
                out.skip(Source(str(f)), "file of no export format")
                continue
            found.append((f, False))
    return found


def documents(path: Path):
    """(line number or None, parsed document) for each document of a file."""
    try:
        if path.suffix.lower() == ".gz":   # a rotated container log the kubelet compressed
            text = gzip.decompress(path.read_bytes()).decode("utf-8")
        else:
            text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ExportError(f"{path}: not UTF-8 text (byte {exc.start})") from None
    except (OSError, EOFError) as exc:   # gzip.BadGzipFile is an OSError
        raise ExportError(f"{path}: cannot read ({getattr(exc, 'strerror', None) or exc})") from None
    if containerlogs.is_log_file(path):
        # lines end at a newline only: a log message may hold U+2028 or a form feed, and splitlines() would
        # cut it there into a line whose time and stream the message chose
        yield None, containerlogs.LogFile(path, text.split("\n"))
        return
    suffix = path.suffix.lower()
    if suffix == ".csv":
        yield None, list(csv.DictReader(io.StringIO(text)))
        return
    if suffix in (".yaml", ".yml"):
        try:
            yield None, yaml.load(text, Loader=NoAliasLoader)  # noqa: S506 - a SafeLoader subclass
        except yaml.YAMLError as exc:
            raise ExportError(f"{path}: not valid YAML ({str(exc).splitlines()[0]})") from None
        return
    if suffix == ".json":
        try:
            yield None, json.loads(text)
            return
        except json.JSONDecodeError as exc:
            if exc.msg != "Extra data":   # anything but a second document on the next line
                raise ExportError(f"{path}: line {exc.lineno} column {exc.colno}: not valid JSON ({exc.msg})") from None
        except RecursionError:
            raise ExportError(f"{path}: nested too deeply") from None
    for n, line in enumerate(text.split("\n"), 1):   # as above: a JSON string may hold a raw U+2028
        if not line.strip():
            continue
        try:
            yield n, json.loads(line)
        except json.JSONDecodeError as exc:
            raise ExportError(f"{path}: line {n} column {exc.colno}: not valid JSON ({exc.msg})") from None
        except RecursionError:
            raise ExportError(f"{path}: line {n}: nested too deeply") from None


def read_exports(paths: list[Path]) -> Collected:
    out = Collected()
    log_files: list[str] = []   # the file each log line came from: lines of two files never join
    for path, named in files_of(paths, out):
        formats = set()
        for line, doc in documents(path):
            src = Source(str(path), line)
            reader = _sniff(doc)
            if reader is None and line is None and not named:   # a folder's README.yaml, a job.yaml
                out.skip(src, "file of no export format")
                continue
            if reader is None:
                if line is None:
                    raise ExportError(f"{path}: not an export rcagent reads (OTLP JSON, Prometheus or Loki "
                                      f"query_range JSON, logcli JSON lines, Elasticsearch hits, Jaeger JSON, kubectl "
                                      f"JSON, a change log, container logs)")
                out.skip(src, "JSON line of no export format")
                continue
            _read(reader, doc, src, out)
            log_files += [str(path)] * (len(out.logs) - len(log_files))
            formats.add(reader)
        for name in formats:
            out.files[name] += 1
    out.rates()
    out.logs, joined = join_lines(out.logs, log_files)
    if joined:
        out.records[JOINED] += joined
    return out


# What a reader raises when a field holds a value of another type or form than its format gives it (an
# object where the format has a list, a number where it has a string): the readers check the nesting they
# walk (rcagent.exports.expect), but not every leaf, and such a file is the user's to fix, not a crash.
MALFORMED = (TypeError, AttributeError, ValueError, KeyError, IndexError, OverflowError, RecursionError)


def _sniff(doc) -> str | None:
    """The format whose reader claims `doc`, if any."""
    for name, module in READERS.items():
        try:
            if module.sniff(doc):
                return name
        except MALFORMED:
            continue
    return None


def _read(reader: str, doc, src: Source, out: Collected) -> None:
    """Read one document with its format's reader; a value of the wrong type or form deep inside it is
    one line naming the file (and line) and the format."""
    try:
        READERS[reader].read(doc, src, out)
    except ExportError:
        raise
    except MALFORMED as exc:
        raise ExportError(f"{src.at(reader + ' export')}: a field holds a value of another type or form than "
                          f"the format gives it ({type(exc).__name__}: {exc})") from None


def reconcile(out: Collected) -> dict[str, str]:
    """One spelling per entity across sources, and services for pods no source gave one; returns the
    renames made (old -> new) after applying them to every row."""
    names = set(out.pods) | set(out.services) | set(out.nodes) | {p.service for p in out.pods.values() if p.service}
    names |= {r[1] for r in out.metrics} | {r[1] for r in out.logs} | {r[6] for r in out.traces}
    by_fold: dict[str, list[str]] = {}
    for name in names:
        by_fold.setdefault(name.casefold(), []).append(name)
    rename = {}
    for spellings in by_fold.values():
        if len(spellings) > 1:
            keep = min(spellings, key=lambda s: (s != s.lower(), s))
            rename.update({s: keep for s in spellings if s != keep})
    for name in names:   # Loki's and Prometheus's `job` is often namespace/app: the app, when it is known
        head, _, tail = name.rpartition("/")
        if head and tail in names and name not in rename:
            rename[name] = rename.get(tail, tail)
    if rename:
        r = lambda name: rename.get(name, name) if name else name  # noqa: E731
        out.metrics = [(t, r(e), m, v) for t, e, m, v in out.metrics]
        out.logs = [(t, r(e), lv, msg, tr) for t, e, lv, msg, tr in out.logs]
        out.events = [(t, r(e), why, msg) for t, e, why, msg in out.events]
        out.traces = [(*row[:5], r(row[5]), r(row[6]), *row[7:]) for row in out.traces]
        out.calls = {(r(a), r(b)) for a, b in out.calls}
        pods = {}
        for name, pod in out.pods.items():
            merged = pods.setdefault(r(name), type(pod)())
            merged.service = merged.service or r(pod.service)
            merged.node = merged.node or r(pod.node)
        out.pods = pods
        services = {}
        for name, kind in out.services.items():
            services[r(name)] = kind if services.get(r(name), "service") == "service" else services[r(name)]
        out.services = services
        out.nodes = {r(n) for n in out.nodes}
    for name in out.services.keys() & out.pods.keys():   # a pod name is never also a service
        if out.pods[name].service in (None, name):
            out.pods.pop(name)
    for name, pod in out.pods.items():
        if pod.service is None:
            for pattern in K8S_POD:
                m = pattern.match(name)
                if m and m.group("owner") in out.services:
                    pod.service = m.group("owner")
                    break
    return rename


def entity_rows(out: Collected) -> tuple[list[tuple], list[tuple]]:
    entities = {name: (name, kind, name, None) for name, kind in out.services.items()}
    entities.update({n: (n, "node", None, n) for n in out.nodes if n not in entities})
    for name, pod in out.pods.items():
        if pod.service:
            entities.setdefault(pod.service, (pod.service, "service", pod.service, None))
        entities[name] = (name, "pod", pod.service, pod.node)
    relations = set()
    for name, pod in out.pods.items():
        if pod.service:
            relations.add((name, pod.service, "instance_of"))
        if pod.node:
            relations.add((name, pod.node, "runs_on"))
    service_of_span = {}
    for row in out.traces:
        service_of_span[(row[0], row[1])] = row[5] or (out.pods[row[6]].service if row[6] in out.pods else row[6])
    for row in out.traces:
        if row[2]:
            caller, callee = service_of_span.get((row[0], row[2])), service_of_span[(row[0], row[1])]
            if caller and callee and caller != callee:
                relations.add((caller, callee, "calls"))
    relations |= {(a, b, "calls") for a, b in out.calls if a != b}
    return sorted(entities.values()), sorted(relations)


def _table(rows: list[tuple], table: str) -> pa.Table:
    columns = list(SCHEMAS[table])
    arrow_types = {"VARCHAR": pa.string(), "DOUBLE": pa.float64(), "TIMESTAMP": pa.timestamp("us")}
    return pa.table({c: pa.array([row[i] for row in rows], type=arrow_types[SCHEMAS[table][c]])
                     for i, c in enumerate(columns)})


def period(text: str, what: str) -> tuple[dt.datetime, dt.datetime, list[str]]:
    """`START..END` (RFC 3339 times) as naive UTC datetimes, and the tables after an `@` (none: all)."""
    text, _, names = text.partition("@")
    tables = [t.strip() for t in names.split(",") if t.strip()]
    unknown = [t for t in tables if t not in SCHEMAS]
    if unknown:
        raise BadInput(f"{what}: unknown table {unknown[0][:40]!r} after '@' (choose from {', '.join(SCHEMAS)})")
    if ".." not in text:
        raise BadInput(f"{what} {text[:60]!r} should be START..END (for example 2024-05-01T10:00Z..2024-05-01T10:30Z)")
    start, end = text.split("..", 1)
    src = Source(what)
    a, b = _time(start, src), _time(end, src)
    if b <= a:
        raise BadInput(f"{what} {text[:60]!r}: the end is not after the start")
    return a, b, tables


def _time(text: str, src: Source) -> dt.datetime:
    text = text.strip()
    if re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d(Z|[+-]\d\d:\d\d)?", text):   # minutes only
        text = text[:16] + ":00" + text[16:]
    return rfc3339(text, src, "time")


def create_job(dest: Path, sources: list[Path], window: str, baseline: list[str] = (), alert: str | None = None,
               system: str = "unknown", job_id: str | None = None, force: bool = False) -> Created:
    start, end, only = period(window, "--window")
    if only:
        raise BadInput("--window applies to every table: no '@' after it")
    periods = [period(b, "--baseline") for b in baseline]
    dest = Path(dest).expanduser()
    if dest.exists() and any(dest.iterdir()):
        if not force:
            raise BadInput(f"{dest}: exists and is not empty (choose a new folder, or --force to replace it)")
        if not (dest / "job.yaml").is_file():   # --force replaces a job, never a folder of other things
            raise BadInput(f"{dest}: is not a job folder (no job.yaml): --force replaces only a job")
    out = read_exports([Path(s).expanduser() for s in sources])
    renamed = reconcile(out)
    entities, relations = entity_rows(out)
    tables = {"entities": entities, "relations": relations, "metrics": out.metrics, "traces": out.traces,
              "logs": out.logs, "events": out.events}
    if not (out.metrics or out.traces or out.logs):
        why = ""
        if out.skipped:   # the records read and not used say why
            (file, reason), n = out.skipped.most_common(1)[0]
            why = f" (skipped: {n} {reason}, in {file})"
        raise BadInput(f"the exports hold no metrics, spans or log lines: nothing to diagnose{why}")
    meta = {"id": job_id or dest.name, "system": system, "source": "exports",
            "alert": alert or f"incident flagged between {iso(start)} and {iso(end)}",
            "window": {"start": iso(start), "end": iso(end)},
            "baseline": [{"start": iso(a), "end": iso(b), **({"tables": t} if t else {})} for a, b, t in periods]}
    con = duckdb.connect(":memory:")
    con.execute("SET TimeZone = 'UTC'")
    for name, rows in tables.items():
        con.register(f"_src_{name}", _table(rows, name))
    if dest.exists():
        shutil.rmtree(dest)
    # a row read twice (overlapping export files, a collector's retried export) counts once
    rows = write_folder(con, dest, meta, {name: f"SELECT DISTINCT * FROM _src_{name}" for name in tables})
    job = Job.load(dest)   # the job reads back as every job does (validated on load)
    warnings = job.warnings()
    job.con.close()
    kinds = Counter(e[1] for e in entities)
    return Created(dest, rows, dict(kinds), out.files, out.records, out.skipped, renamed, warnings)
