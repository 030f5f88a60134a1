"""Importers: turn public RCA benchmark data into jobs (DEST/jobs/<id>/) and labels (DEST/labels/<id>.yaml).

Shared helpers live here: extracting an archive into the cache, opaque job ids, writing a job folder
and its label. Each source has its own module (nezha, rcd, petshop, changerca) exposing
`import_source(src, dest)`.
"""
from __future__ import annotations

import datetime as dt
import hashlib
import lzma
import shutil
import tarfile
import tempfile
import zlib
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import duckdb
import yaml

from rcagent.config import cache_dir
from rcagent.errors import BadInput
from rcagent.job import SCHEMAS


@dataclass
class ImportReport:
    source: str
    jobs: list[str] = field(default_factory=list)
    lacking: dict[str, list[str]] = field(default_factory=dict)  # job id -> tables it lacks
    systems: dict[str, int] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)        # case id -> why it was not imported

    def add(self, job_id: str, system: str, rows: dict[str, int]) -> None:
        self.jobs.append(job_id)
        self.systems[system] = self.systems.get(system, 0) + 1
        empty = [t for t in SCHEMAS if not rows.get(t)]
        if empty:
            self.lacking[job_id] = empty

    @contextmanager
    def case(self, dest: Path, case_id: str, job_id: str):
        """One case's import. A case not laid out as its source's cases are (a file missing, a cell that is
        no number) is skipped with its reason and what was written of it removed; the other cases go on."""
        try:
            yield
        except LAYOUT_ERRORS as exc:
            shutil.rmtree(dest / "jobs" / job_id, ignore_errors=True)
            (dest / "labels" / f"{job_id}.yaml").unlink(missing_ok=True)
            self.skipped[case_id] = _reason(exc)


# what a source not laid out as expected raises (a renamed folder, a junk file; json's errors are ValueErrors);
# within one case also a file missing or the importer's own refusal (a disk that is full stops the import)
SOURCE_ERRORS = (duckdb.Error, KeyError, ValueError, TypeError, IndexError)
LAYOUT_ERRORS = (*SOURCE_ERRORS, AttributeError, FileNotFoundError, NotADirectoryError, BadInput)


def _reason(exc: BaseException) -> str:
    detail = (str(exc).strip().splitlines() or [""])[0][:160]
    return detail if isinstance(exc, BadInput) else f"{type(exc).__name__}: {detail}"


@contextmanager
def extracted(src: str | Path):
    """The folder holding the source's data: SRC itself, or SRC's archive extracted into a temporary
    folder under the cache for the length of one import, then removed (extracting takes seconds; copies kept
    for later would pile up, one per version of each archive). A truncated archive is one line."""
    src = Path(src).expanduser()
    if src.is_dir():
        yield src
        return
    if not src.is_file():
        raise BadInput(f"source not found: {src}")
    parent = cache_dir() / "data"
    try:
        parent.mkdir(parents=True, exist_ok=True)
        folder = Path(tempfile.mkdtemp(prefix=f"{src.name.split('.')[0]}-", dir=parent))
    except OSError as exc:
        raise BadInput(f"{parent}: cannot extract there ({exc.strerror or exc})") from None
    try:
        try:
            with tarfile.open(src) as tar:
                tar.extractall(folder, filter="data")
        except (tarfile.TarError, OSError, EOFError, lzma.LZMAError, zlib.error) as exc:
            raise BadInput(f"{src}: cannot extract ({str(exc).strip() or type(exc).__name__})") from None
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def find_dir(root: Path, name: str) -> Path:
    """The folder called `name` at or below root (archives nest their data one level down)."""
    if root.name == name:
        return root
    for candidate in [root / name, *sorted(root.glob(f"*/{name}"))]:
        if candidate.is_dir():
            return candidate
    raise BadInput(f"{root}: no '{name}' folder found (is this the right archive?)")


def csv_view(con: duckdb.DuckDBPyConnection, view: str, files: list[Path], filename: bool = False) -> str:
    """Register CSV files (all text, columns united by name; with `filename`, a column naming each row's
    file) as the view `view`, through DuckDB's relational API: a path is an argument, never SQL text (a
    folder name may hold a quote)."""
    try:
        con.read_csv([str(f) for f in files], header=True, all_varchar=True, union_by_name=True,
                     max_line_size=256 * 1024 * 1024, filename=filename).create_view(view, replace=True)
    except duckdb.Error as exc:
        where = files[0] if len(files) == 1 else f"{files[0].parent} ({len(files)} files)"
        raise BadInput(f"{where}: cannot be read as CSV ({str(exc).strip().splitlines()[0][:160]})") from None
    return view


def ident(name: str) -> str:
    """A column name from a file's header as a quoted SQL identifier (its quotes doubled)."""
    return '"' + str(name).replace('"', '""') + '"'


def opaque_id(prefix: str, source: str, case_id: str) -> str:
    """A job id that says which system it is but never what the answer is."""
    return f"{prefix}-{hashlib.sha1(f'{source}:{case_id}'.encode()).hexdigest()[:8]}"


def iso(ts: dt.datetime) -> str:
    return ts.replace(microsecond=0).isoformat() + "Z"


def floor_minute(ts: dt.datetime) -> dt.datetime:
    return ts.replace(second=0, microsecond=0)


def write_job(con: duckdb.DuckDBPyConnection, dest: Path, job_id: str, meta: dict,
              tables: dict[str, str]) -> dict[str, int]:
    """Write DEST/jobs/<id>/job.yaml and one Parquet file per non-empty table (given as SQL)."""
    folder = dest / "jobs" / job_id
    if folder.exists():
        shutil.rmtree(folder)
    return write_folder(con, folder, {"id": job_id, **meta}, tables)


def write_folder(con: duckdb.DuckDBPyConnection, folder: Path, meta: dict, tables: dict[str, str]) -> dict[str, int]:
    """Write FOLDER/job.yaml (`meta`, its id first) and one Parquet file per non-empty table (given as SQL)."""
    folder.mkdir(parents=True)
    rows: dict[str, int] = {}
    for table, sql in tables.items():
        cols = ", ".join(f"CAST({c} AS {t}) AS {c}" for c, t in SCHEMAS[table].items())
        con.execute(f"CREATE OR REPLACE TEMP TABLE _out AS SELECT {cols} FROM ({sql})")
        n = con.execute("SELECT count(*) FROM _out").fetchall()[0][0]
        rows[table] = n
        if n:
            order = {"metrics": "entity, metric, timestamp", "logs": "timestamp", "traces": "start",
                     "events": "timestamp"}.get(table)
            order_sql = f" ORDER BY {order}" if order else ""
            # the relational API takes the path as an argument: a DEST holding a quote is just a path
            con.sql(f"SELECT * FROM _out{order_sql}").write_parquet(str(folder / (table + ".parquet")),
                                                                    compression="zstd")
    (folder / "job.yaml").write_text(yaml.safe_dump(meta, sort_keys=False, width=110))
    return rows


def write_label(dest: Path, job_id: str, label: dict) -> None:
    folder = dest / "labels"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{job_id}.yaml").write_text(yaml.safe_dump({"job": job_id, **label}, sort_keys=False, width=110))


IMPORTERS = ("nezha", "rcd", "petshop", "changerca")


def run_import(kind: str, src: str | Path, dest: str | Path, progress=None, only: set[str] | None = None) -> ImportReport:
    """Import a source into DEST/jobs and DEST/labels; `only`: just these case ids (nezha sources)."""
    if only is not None and kind != "nezha":
        raise BadInput(f"importing only some cases is supported for nezha sources, not {kind}")
    if kind == "nezha":
        from rcagent.importers.nezha import import_source
    elif kind == "rcd":
        from rcagent.importers.rcd import import_source
    elif kind == "petshop":
        from rcagent.importers.petshop import import_source
    elif kind == "changerca":
        from rcagent.importers.changerca import import_source
    else:
        raise BadInput(f"unknown importer '{kind}' (choose from {', '.join(IMPORTERS)})")
    dest = Path(dest).expanduser()
    with extracted(src) as root:
        try:
            dest.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise BadInput(f"{dest}: cannot create the destination ({exc.strerror or exc})") from None
        try:
            report = import_source(root, dest, progress=progress, **({"only": only} if only is not None else {}))
        except SOURCE_ERRORS as exc:
            raise BadInput(f"{src}: not {kind} data as expected ({_reason(exc)})") from None
    if report.skipped and not report.jobs:
        case, why = next(iter(report.skipped.items()))
        raise BadInput(f"{src}: not {kind} data as expected: none of its {len(report.skipped)} cases was "
                       f"imported ({case}: {why})")
    return report
