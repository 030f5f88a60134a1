"""A job: one incident folder (job.yaml + telemetry tables), loaded as DuckDB views.

Tables are registered as views over their files, never copied. A missing or empty table becomes an
empty view with the right columns, so every tool can query every table.
"""
from __future__ import annotations

import datetime as dt
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

import duckdb
from rapidfuzz import process, fuzz

from rcagent.errors import BadInput, UnknownEntity
from rcagent.validate import JobMeta, PeriodSpec, check, load_yaml

MAX_LINE_BYTES = 256 * 1024 * 1024   # a CSV line up to this is read (and its text cut), not refused
TEXT_MAX = 8192                      # characters of a text value kept (a 10 MB log line is cut here)
SAMPLED_IDS = 20                     # trace ids in the window's log lines needed to say the traces look sampled

# Column name -> DuckDB type, per table; the order is the order of the view.
SCHEMAS: dict[str, dict[str, str]] = {
    "entities": {"id": "VARCHAR", "kind": "VARCHAR", "service": "VARCHAR", "node": "VARCHAR"},
    "relations": {"src": "VARCHAR", "dst": "VARCHAR", "kind": "VARCHAR"},
    "metrics": {"timestamp": "TIMESTAMP", "entity": "VARCHAR", "metric": "VARCHAR", "value": "DOUBLE"},
    "traces": {
        "trace_id": "VARCHAR", "span_id": "VARCHAR", "parent_id": "VARCHAR", "start": "TIMESTAMP",
        "duration_ms": "DOUBLE", "service": "VARCHAR", "entity": "VARCHAR", "operation": "VARCHAR",
        "status": "VARCHAR",
    },
    "logs": {"timestamp": "TIMESTAMP", "entity": "VARCHAR", "level": "VARCHAR", "message": "VARCHAR",
             "trace_id": "VARCHAR"},
    "events": {"timestamp": "TIMESTAMP", "entity": "VARCHAR", "reason": "VARCHAR", "message": "VARCHAR"},
}
TABLES = tuple(SCHEMAS)
# Columns without which a row says nothing (what it is about; a log line's text): a row with one of them
# empty is left out of the table's view, and counted in a warning.
NEEDED = {"entities": ("id",), "relations": ("src", "dst"), "metrics": ("entity", "metric"), "traces": ("entity",),
          "logs": ("entity", "message"), "events": ("entity",)}
# Columns a file may omit (they read as NULL); every other column is required.
OPTIONAL_COLUMNS = {"entities": {"service", "node"}, "traces": {"status", "parent_id", "service"},
                    "logs": {"trace_id", "level"}, "events": {"reason"}}


@dataclass(frozen=True)
class Period:
    start: dt.datetime
    end: dt.datetime
    tables: tuple[str, ...] = TABLES  # which tables this baseline period applies to

    @property
    def seconds(self) -> float:
        return (self.end - self.start).total_seconds()


@dataclass(frozen=True)
class Entity:
    id: str
    kind: str
    service: str | None = None
    node: str | None = None


class Coverage(NamedTuple):
    """One table of series against the job's periods (Job.coverage)."""
    table: str
    window: int                          # rows in the window
    baseline: int                        # rows in the baseline periods that apply to it
    given: int                           # ... in those of them job.yaml gave (not the part before an onset)
    untimed: int                         # rows with no time
    first: dt.datetime | None            # its first and last timed row
    last: dt.datetime | None
    first_in_window: dt.datetime | None


@dataclass
class Job:
    path: Path
    id: str
    system: str
    alert: str
    window: Period
    baseline: list[Period]
    con: duckdb.DuckDBPyConnection
    rows: dict[str, int] = field(default_factory=dict)  # table -> row count (0 if missing)
    files: dict[str, Path] = field(default_factory=dict)
    entities: dict[str, Entity] = field(default_factory=dict)
    cache: dict = field(default_factory=dict)  # derived tables and results tools may reuse
    source: str = ""                           # the public dataset the job was imported from, if known
    onset: Period | None = None  # the window before the onset found in it: the baseline of tables given none
    redactor: object | None = None   # rcagent.redact.Redactor when the text was redacted on load
    lock: threading.RLock = field(default_factory=threading.RLock, repr=False, compare=False)
    notes: list[str] = field(default_factory=list)   # what loading changed of what job.yaml says, for the user

    # ---- loading -------------------------------------------------------------------------------
    @classmethod
    def load(cls, path: str | Path, redact: bool = True) -> "Job":
        """The job in `path`; with `redact`, its text columns read with secrets replaced (rcagent.redact)."""
        path = Path(path)
        if path.name == "job.yaml" and path.is_file():   # `--job incident/job.yaml` names its folder
            path = path.parent
        if not path.is_dir():
            raise BadInput(f"job folder not found: {path}")
        meta_file = path / "job.yaml"
        meta = read_meta(path)
        window = _period(meta.window, meta_file, "window")
        specs = meta.baseline if isinstance(meta.baseline, list) else [meta.baseline] if meta.baseline else []
        given = [_period(b, meta_file, f"baseline[{i}]") for i, b in enumerate(specs)]
        baseline = [part for p in given for part in cut_around(p, window.start, window.end)]
        con = duckdb.connect(":memory:")
        notes = [f"baseline {p.start:%Y-%m-%d %H:%M:%S} to {p.end:%Y-%m-%d %H:%M:%S} overlaps the window: only its "
                 f"parts outside the window are compared with (read as given, the incident's own samples would "
                 f"count as normal)"
                 for p in given if p.start < window.end and window.start < p.end]
        # a file's zoned times (Parquet's timestamptz, a CSV's "+08:00") are read as UTC, whatever this
        # machine's own zone is: DuckDB would otherwise convert them to local time
        con.execute("SET TimeZone = 'UTC'")
        job = cls(path=path, id=meta.id, system=meta.system, alert=meta.alert, window=window, baseline=baseline,
                  con=con, source=meta.source or "", notes=notes)
        try:
            for table in TABLES:
                job._register(table, (meta.tables or {}).get(table))
        except BadInput:
            con.close()
            raise
        job.entities = {r[0]: Entity(*r) for r in con.execute(
            "SELECT id, coalesce(kind, 'unknown'), service, node FROM entities WHERE id IS NOT NULL").fetchall()}
        if not job.entities:  # fall back to whatever names the telemetry carries
            for (name,) in con.execute(
                    "SELECT DISTINCT entity FROM metrics UNION SELECT DISTINCT entity FROM logs "
                    "UNION SELECT DISTINCT entity FROM traces").fetchall():
                if name:
                    job.entities[name] = Entity(name, "unknown")
        if redact:
            from rcagent.redact import redact_job
            job.redactor = redact_job(job)
        from rcagent.onset import split_at_onset
        split_at_onset(job)
        return job

    def _table_file(self, table: str, declared: str | None) -> Path | None:
        """The table's file inside the job folder (symlinks resolved), or None when it has none."""
        root = self.path.resolve()
        candidates = [declared] if declared else [f"{table}.parquet", f"{table}.csv"]
        for name in candidates:
            file = (self.path / name)
            if not (file.exists() or file.is_symlink()):   # a folder or a FIFO is refused below, not skipped
                continue
            real = file.resolve()
            if not real.is_relative_to(root):
                raise BadInput(f"{file}: table '{table}' points outside the job folder ({real})")
            if not real.is_file():
                raise BadInput(f"{file}: table '{table}' is not a file")
            return real
        if declared:
            if Path(declared).is_absolute() or ".." in Path(declared).parts:
                raise BadInput(f"{self.path / 'job.yaml'}: tables.{table}: '{declared}' is outside the job folder")
            raise BadInput(f"{self.path / declared}: listed in job.yaml but missing")
        return None

    def _register(self, table: str, declared: str | None) -> None:
        """A view `table` with the schema's columns over the table's file, read through DuckDB's relational
        API (the path is an argument, never SQL text). Unparseable values fail the job with a count;
        NaN and infinite numbers read as NULL; text longer than TEXT_MAX is cut."""
        schema = SCHEMAS[table]
        file = self._table_file(table, declared)
        if file is not None and file.stat().st_size == 0:   # an empty file is an empty table
            file = None
        if file is None:
            cols = ", ".join(f"NULL::{t} AS {c}" for c, t in schema.items())
            self.con.execute(f"CREATE VIEW {table} AS SELECT {cols} WHERE false")
            self.rows[table] = 0
            return
        try:
            if file.suffix == ".parquet":
                raw = self.con.read_parquet(str(file))
            elif file.suffix == ".csv":
                raw = self.con.read_csv(str(file), header=True, all_varchar=True, max_line_size=MAX_LINE_BYTES)
            else:
                raise BadInput(f"{file}: unsupported table format (use .parquet or .csv)")
            raw.create_view(f"_raw_{table}")
            present = {c: str(type_) for c, type_ in zip(raw.columns, raw.types)}
        except duckdb.Error as exc:
            raise BadInput(f"{file}: cannot be read ({_first_line(exc)})") from None
        missing = [c for c in schema if c not in present and c not in OPTIONAL_COLUMNS.get(table, ())]
        if missing:
            raise BadInput(f"{file}: missing column(s) {', '.join(missing)} for table '{table}'")
        # The column names are the schema's own (checked present above), never the file's text.
        cols = ", ".join(f"{_typed(c, t, present[c])} AS {c}" if c in present else f"NULL::{t} AS {c}"
                         for c, t in schema.items())
        empty = " OR ".join(f'"{c}" IS NULL' for c in NEEDED[table])
        self.con.execute(f"CREATE VIEW {table} AS SELECT * FROM (SELECT {cols} FROM _raw_{table}) WHERE NOT ({empty})")
        typed_cols = [c for c, t in schema.items() if c in present and t != "VARCHAR"]
        checks = [f'count(*) FILTER (WHERE "{c}" IS NOT NULL AND {_cast(c, schema[c], present[c])} IS NULL)'
                  for c in typed_cols]
        try:
            # the needed columns are required text columns, null in the view exactly where null in the file
            n, left_out, *bad = self.con.execute(
                f"SELECT count(*), count(*) FILTER (WHERE {empty}){''.join(', ' + c for c in checks)} "
                f"FROM _raw_{table}").fetchall()[0]
        except duckdb.Error as exc:
            raise BadInput(f"{file}: cannot be read ({_first_line(exc)})") from None
        if left_out:
            self.notes.append(f"{table}: {left_out} of its {n} rows have no {' or '.join(NEEDED[table])} "
                              f"and are not used")
        for col, count in zip(typed_cols, bad):
            if count:
                raise BadInput(f"{file}: {count} row(s) with an unparseable '{col}' "
                               f"(expected {schema[col].lower()})")
        self.rows[table] = int(n)
        self.files[table] = file

    # ---- queries -------------------------------------------------------------------------------
    def query(self, sql: str, params: list | None = None) -> list[tuple]:
        # one DuckDB connection is not safe across threads (span mode's agents): queries take turns
        with self.lock:
            return self.con.execute(sql, params or []).fetchall()

    def in_window(self, column: str = "timestamp") -> str:
        """SQL condition: the column falls inside the flagged window."""
        return f"({column} >= TIMESTAMP '{self.window.start}' AND {column} < TIMESTAMP '{self.window.end}')"

    def in_baseline(self, table: str, column: str = "timestamp", given: bool = False) -> str:
        """SQL condition: the column falls inside a baseline period that applies to this table (`given`: one
        that job.yaml gave, not the window's part before an onset)."""
        parts = [f"({column} >= TIMESTAMP '{p.start}' AND {column} < TIMESTAMP '{p.end}')"
                 for p in self.baseline if table in p.tables and not (given and p is self.onset)]
        return "(" + " OR ".join(parts) + ")" if parts else "false"

    def baseline_seconds(self, table: str) -> float:
        return sum(p.seconds for p in self.baseline if table in p.tables)

    @staticmethod
    def time_column(table: str) -> str:
        """The column that dates a table's rows: a span's start, any other row's timestamp."""
        return "start" if table == "traces" else "timestamp"

    def observed_seconds(self, table: str, window: bool = True) -> float:
        """Seconds of the window (or of the table's baseline periods) that the table's data spans: rates
        are counts over the time that was recorded, not over a period the collector only partly covered."""
        if not self.rows.get(table):
            return 0.0
        key = ("span", table)
        if key not in self.cache:
            column = self.time_column(table)
            self.cache[key] = self.query(f"SELECT min({column}), max({column}) FROM {table}")[0]
        first, last = self.cache[key]
        periods = [self.window] if window else [p for p in self.baseline if table in p.tables]
        if first is None:
            return 0.0
        total = 0.0
        for p in periods:
            if last < p.start or first >= p.end:   # data that never reached into the period covers none of it
                continue
            # data that stops a little before a period's end (a sampling interval: up to a minute, at most
            # a tenth of the period) covers it
            slack = dt.timedelta(seconds=min(60.0, 0.1 * p.seconds))
            total += max(0.0, (min(p.end, last + slack) - max(p.start, first - slack)).total_seconds())
        return total

    # ---- entities ------------------------------------------------------------------------------
    def resolve(self, name: str) -> Entity:
        """An inventory entity by exact, case-insensitive, unique-prefix or fuzzy match."""
        name = (name or "").strip()
        if name in self.entities:
            return self.entities[name]
        lower = {k.lower(): k for k in self.entities}
        if name.lower() in lower:
            return self.entities[lower[name.lower()]]
        starts = [k for k in self.entities if k.lower().startswith(name.lower())] if len(name) >= 3 else []
        services = [k for k in starts if self.entities[k].kind == "service"]
        if len(starts) == 1 or len(services) == 1:
            return self.entities[(services or starts)[0]]
        raise UnknownEntity(name, self.nearest(name))

    def nearest(self, name: str, limit: int = 3) -> list[str]:
        if not self.entities:
            return []
        return [m[0] for m in process.extract(name, list(self.entities), scorer=fuzz.WRatio, limit=limit)]

    def members(self, entity: Entity) -> list[str]:
        """Names whose telemetry belongs to this entity: a service includes its pods, a node its pods."""
        names = [entity.id]
        if entity.kind == "service":
            names += [e.id for e in self.entities.values() if e.service == entity.id and e.id != entity.id]
        elif entity.kind == "node":
            names += [e.id for e in self.entities.values() if e.node == entity.id and e.id != entity.id]
        return names

    def without_history(self) -> list[str]:
        """The tables of series (metrics, traces, logs) that have rows but none in a baseline period, not even
        in the window's part before an onset: no period applies to them, or those that do hold none of their
        rows (a baseline given the wrong date). Nothing of their own to compare the window with."""
        return [c.table for c in self.coverage() if not c.baseline]   # no period applies: a count of 0 too

    def given_baseline(self, table: str) -> bool:
        """Whether job.yaml gave a baseline period that applies to the table."""
        return any(table in p.tables for p in self.baseline if p is not self.onset)

    def coverage(self) -> list[Coverage]:
        """How each table of series (metrics, traces, logs) with rows falls in the job's periods, from one
        scan of it. Cached."""
        if "coverage" not in self.cache:
            out = []
            for table in (t for t in ("metrics", "traces", "logs") if self.rows.get(t)):
                col = self.time_column(table)
                out.append(Coverage(table, *self.query(
                    f"SELECT count(*) FILTER (WHERE {self.in_window(col)}), "
                    f"count(*) FILTER (WHERE {self.in_baseline(table, col)}), "
                    f"count(*) FILTER (WHERE {self.in_baseline(table, col, given=True)}), "
                    f"count(*) FILTER (WHERE {col} IS NULL), "
                    f"min({col}), max({col}), min({col}) FILTER (WHERE {self.in_window(col)}) FROM {table}")[0]))
            self.cache["coverage"] = out
        return self.cache["coverage"]

    def unused_tables(self) -> list[tuple[str, int, int, dt.datetime, dt.datetime]]:
        """(table, rows, rows in its baseline, first, last) of every table of series (metrics, traces, logs)
        that holds rows but none inside the window: times written in another zone than the job's periods
        (local time where UTC was meant; then none in the baseline either), a window given the wrong date, or
        collection that stopped. Such a table would otherwise read as present and go unused."""
        return [(c.table, self.rows[c.table], c.baseline, c.first, c.last) for c in self.coverage()
                if not c.window and c.first is not None]

    def baseless_tables(self) -> list[tuple[str, int, dt.datetime, dt.datetime]]:
        """(table, rows in the window, first, last) of every table of series with rows in the window and a
        baseline period that applies to it, but no row in it: collection that began late (after the onset
        that made the window's first part its baseline), a baseline given the wrong date (then the window is
        split at its onset, as for a table given none). Such a table reads as compared with its past and has
        none."""
        return [(c.table, c.window, c.first, c.last) for c in self.coverage()
                if c.window and ((not c.baseline and self.baseline_seconds(c.table))
                                 or (not c.given and self.given_baseline(c.table)))]

    def untimed(self) -> list[tuple[str, int]]:
        """(table, rows) of every table of series whose time column is empty on some rows (a collector that
        left it out, a CSV cell left blank): such rows fall in no period and are never compared."""
        return [(c.table, c.untimed) for c in self.coverage() if c.untimed]

    def warnings(self) -> list[str]:
        """What the user should know about how the job was read: a baseline cut around the window, tables
        with nothing in the window or nothing in their baseline, rows with no time, tables of series given
        no baseline (compared within the window: a weaker answer)."""
        return self._read_notes() + self.no_baseline_notes()

    def _read_notes(self) -> list[str]:
        return self.notes + self.unused_notes() + self.baseless_notes() + [
            f"{table}: {n} of its {self.rows[table]} rows have no {self.time_column(table)} and are not used"
            for table, n in self.untimed()] + self.sampled_notes()

    def trace_share(self) -> float | None:
        """The share of the window's log trace ids that have spans, when most have none (20 ids or more):
        the traces look sampled (a tracer keeps some requests' spans, the logs keep every line). None when
        they do not, or the job lacks logs with trace ids or traces."""
        counts = self._sampled_ids()
        return None if counts is None else (counts[0] - counts[1]) / counts[0]

    def _sampled_ids(self) -> tuple[int, int] | None:
        """(trace ids in the window's log lines, those without a span) when most have none; cached."""
        if "sampled_ids" not in self.cache:
            counts = None
            if self.rows.get("logs") and self.rows.get("traces"):
                ids, spanless = self.query(f"""
                    WITH ids AS (SELECT DISTINCT trace_id FROM logs WHERE trace_id IS NOT NULL AND {self.in_window()})
                    SELECT count(*), count(*) FILTER (WHERE trace_id NOT IN (SELECT trace_id FROM traces
                                                                             WHERE trace_id IS NOT NULL))
                    FROM ids""")[0]
                if ids >= SAMPLED_IDS and spanless > ids / 2:
                    counts = ids, spanless
            self.cache["sampled_ids"] = counts
        return self.cache["sampled_ids"]

    def sampled_notes(self) -> list[str]:
        """One line when the traces look sampled (trace_share): a rarely called entity then keeps a few
        calls, and what is judged per call (latency, own time, the lines its calls write) rests on them."""
        counts = self._sampled_ids()
        if counts is None:
            return []
        ids, spanless = counts
        return [f"traces: {spanless} of the {ids} trace ids in the window's log lines have no span, "
                "so the traces look sampled: a rarely called entity keeps few calls, and its "
                "latency, own time and the lines its calls write are judged from those few, and what "
                f"the traces show weighs less (the square root of the {self.trace_share():.0%} kept)"]

    def no_baseline_notes(self) -> list[str]:
        """One line for the tables of series no given baseline period covers (or none of whose rows the given
        periods hold): they are compared with the window's part before the onset found in it, or, with no
        onset, only entity against entity. A fault already under way when the window begins then shows as no
        change, so the operator is told how to get a firmer answer. (The summary the model reads says the
        same in its Baseline line.)"""
        fix = "add a fault-free period before the incident to the job's baseline for a firmer answer"
        seen = {c.table for c in self.coverage() if c.window}   # a table with nothing in it is named unused
        if self.onset is not None and (split := [t for t in self.onset.tables if t in seen]):
            return [f"{', '.join(split)}: {self._lacking(split)}; compared with the window's part before the onset "
                    f"found in it at {self.onset.end:%Y-%m-%d %H:%M:%S} UTC, so a fault already under way when "
                    f"the window begins shows as no change: {fix}"]
        if bare := [t for t in self.without_history() if t in seen]:
            return [f"{', '.join(bare)}: {self._lacking(bare)} and no onset stands out in the window; compared "
                    f"entity against entity only: {fix}"]
        return []

    def _lacking(self, tables: list[str]) -> str:
        """What the tables lack: a baseline, or rows in the one given (baseless_notes says where they lie)."""
        given = [self.given_baseline(t) for t in tables]
        their = "its" if len(tables) == 1 else "their"
        return ("no baseline given" if not any(given) else f"none of {their} rows in the baseline given" if all(given)
                else "no baseline given, or none of their rows in it")

    def unused_notes(self) -> list[str]:
        """One line per table unused_tables() names, for the operator and the prompt."""
        notes = []
        for table, n, baseline, first, last in self.unused_tables():
            window = "the window from the onset found in it" if self.onset else "the window"
            where = (f"they lie {first:%Y-%m-%d %H:%M:%S} to {last:%Y-%m-%d %H:%M:%S} UTC; {window} is "
                     f"{self.window.start:%Y-%m-%d %H:%M:%S} to {self.window.end:%Y-%m-%d %H:%M:%S}")
            if baseline:
                inside = "in the window after its onset" if self.onset else "in the window"
                notes.append(f"{table}: none of its {n} rows {inside} ({where}): did its collection stop, "
                             "or is the window's date wrong?")
            else:
                notes.append(f"{table}: {n} rows, none in the window or its baseline ({where}): are their "
                             "times in another time zone?")
        return notes

    def baseless_notes(self) -> list[str]:
        """One line per table baseless_tables() names."""
        notes = []
        empty = {c.table for c in self.coverage() if not c.baseline}
        for table, n, first, last in self.baseless_tables():
            if self.onset is not None and table in self.onset.tables and table in empty:
                begin = next(c.first_in_window for c in self.coverage() if c.table == table)
                notes.append(f"{table}: its {n} rows in the window all lie after the onset found in it at "
                             f"{self.onset.end:%Y-%m-%d %H:%M:%S} UTC (the first at {begin:%H:%M:%S}): nothing "
                             "of their own to compare them with")
            else:
                periods = "; ".join(f"{p.start:%Y-%m-%d %H:%M:%S} to {p.end:%Y-%m-%d %H:%M:%S}"
                                    for p in self.baseline if table in p.tables and p is not self.onset)
                notes.append(f"{table}: none of its rows lie in its baseline ({periods} UTC; they lie "
                             f"{first:%Y-%m-%d %H:%M:%S} to {last:%Y-%m-%d %H:%M:%S}): nothing of their own to "
                             "compare the window with; is the baseline's date wrong?")
        return notes

    def summary(self) -> str:
        kinds: dict[str, int] = {}
        for e in self.entities.values():
            kinds[e.kind] = kinds.get(e.kind, 0) + 1
        inv = ", ".join(f"{n} {k}s" for k, n in sorted(kinds.items()))
        tables = ", ".join(f"{t} {self.rows[t]}" for t in TABLES if self.rows.get(t))
        missing = [t for t in TABLES if not self.rows.get(t)]
        given = [p for p in self.baseline if p is not self.onset]
        baseline = "; ".join(f"{p.start} to {p.end} ({', '.join(p.tables)})" for p in given) or "none given"
        window = f"{self.window.start} to {self.window.end} UTC"
        if self.onset:
            window = (f"{self.onset.start} to {self.window.end} UTC; compared from the onset found in it at "
                      f"{self.onset.end}")
            baseline += (f"; for {', '.join(self.onset.tables)}, which had none: the window before the onset "
                         f"({self.onset.start} to {self.onset.end})")
        elif bare := self.without_history():
            baseline += (f"; for {', '.join(bare)}, none, and no onset stands out inside the window "
                         "(it is one regime)")
            if "metrics" in bare:
                baseline += (": metrics are compared with their peers' (pods with their replicas, others with the "
                             "rest of their kind)")
        text = (f"System: {self.system}\nFlagged window: {window}\nBaseline: {baseline}"
                f"\nInventory: {inv}\nRows: {tables}")
        if missing:
            text += f"\nNo data for: {', '.join(missing)}"
        for note in self._read_notes():
            text += f"\nNote: {note}"
        return text


def read_meta(folder: Path) -> JobMeta:
    """A job folder's job.yaml, validated (types, known keys only)."""
    meta_file = Path(folder) / "job.yaml"
    if not meta_file.is_file():
        inner = sorted(f.parent.name for f in Path(folder).glob("*/job.yaml"))
        if inner:   # a folder of jobs (an importer's `jobs/`) where one job was meant
            raise BadInput(f"{meta_file}: missing; {folder} holds {len(inner)} job folder(s) ("
                           f"{', '.join(inner[:3])}{', ...' if len(inner) > 3 else ''}): name one with --job, or "
                           f"diagnose them all with `rcagent batch --jobs {folder}`")
        raise BadInput(f"{meta_file}: missing (a job folder needs job.yaml)")
    raw = load_yaml(meta_file, "job.yaml")
    if not isinstance(raw, dict):
        raise BadInput(f"{meta_file}: expected a mapping with id, system, alert, window, baseline")
    return check(JobMeta, raw, str(meta_file))


def _cast(column: str, kind: str, raw: str) -> str:
    """The raw column (of DuckDB type `raw`) as `kind`, NULL where it does not parse. A text time goes
    through TIMESTAMPTZ: its offset ("10:00+02:00") is applied, where a direct cast would drop it."""
    if kind == "TIMESTAMP" and raw == "VARCHAR":
        return f'TRY_CAST(TRY_CAST("{column}" AS TIMESTAMPTZ) AS TIMESTAMP)'
    return f'TRY_CAST("{column}" AS {kind})'


def _typed(column: str, kind: str, raw: str) -> str:
    if kind == "DOUBLE":   # NaN and inf are no measurement: they must never win a ranking
        return f'CASE WHEN isfinite({_cast(column, kind, raw)}) THEN {_cast(column, kind, raw)} END'
    if kind == "VARCHAR":
        return f'left(CAST("{column}" AS VARCHAR), {TEXT_MAX})'
    return _cast(column, kind, raw)


def _first_line(exc: Exception) -> str:
    text = str(exc).strip()
    return (text.splitlines()[0] if text else type(exc).__name__)[:200]


def parse_time(value, where: str) -> dt.datetime:
    """A UTC timestamp (naive datetime in UTC) from a YAML value."""
    if isinstance(value, dt.datetime):
        ts = value
    elif isinstance(value, dt.date):
        ts = dt.datetime(value.year, value.month, value.day)
    else:
        try:
            ts = dt.datetime.fromisoformat(str(value).replace("Z", "+00:00"))
        except ValueError:
            raise BadInput(f"{where}: '{value}' is not an ISO timestamp") from None
    if ts.tzinfo is not None:
        ts = ts.astimezone(dt.timezone.utc).replace(tzinfo=None)
    return ts


def cut_around(period: Period, start: dt.datetime, end: dt.datetime) -> list[Period]:
    """The parts of a baseline period before `start` and after `end`: a baseline that runs through the
    window ("the last hour") would count the incident's own samples as normal."""
    if period.end <= start or period.start >= end:
        return [period]
    parts = [Period(period.start, start, period.tables)] if period.start < start else []
    return parts + ([Period(end, period.end, period.tables)] if period.end > end else [])


def _period(spec: PeriodSpec, file: Path, where: str) -> Period:
    start = parse_time(spec.start, f"{file}: {where}.start")
    end = parse_time(spec.end, f"{file}: {where}.end")
    if end <= start:
        raise BadInput(f"{file}: '{where}' ends before it starts")
    return Period(start, end, tuple(spec.tables or TABLES))
