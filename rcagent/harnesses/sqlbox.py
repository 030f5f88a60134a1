"""A read-only SQL sandbox over one job's tables, for the SQL agent.

The job's tables are copied into a fresh in-memory DuckDB; then file access, extension loading and Python
replacement scans are switched off and the configuration is locked, so no query can read or write a file,
attach a database, install anything or change those settings back. On top, only a single SELECT statement
runs (a refusal says what to write instead); results stop at a row limit and a query stops at a time limit.
"""
from __future__ import annotations

import json
import threading

import duckdb

from rcagent.job import TABLES, Job
from rcagent.tables import render_table
from rcagent.tools.common import quoted

CELL_MAX = 120
HINT = ("Write one read-only SELECT (or WITH ... SELECT) over the job's tables: "
        + ", ".join(TABLES) + ".")


class QueryRefused(Exception):
    """A query the sandbox will not run, or one that failed: the message is for the model."""


class SqlBox:
    def __init__(self, job: Job, row_limit: int = 50, timeout_s: float = 10.0):
        self.row_limit, self.timeout_s = row_limit, timeout_s
        self.con = duckdb.connect(":memory:", config={
            "autoinstall_known_extensions": False, "autoload_known_extensions": False,
            "allow_community_extensions": False, "threads": 1, "memory_limit": "2GB"})
        for table in TABLES:
            data = job.con.sql(f"SELECT * FROM {table}").to_arrow_table()   # `table` is one of the schema's names
            self.con.register("_source", data)
            self.con.execute(f"CREATE TABLE {table} AS SELECT * FROM _source")
            self.con.unregister("_source")
        for setting in ("SET python_enable_replacements = false", "SET enable_external_access = false",
                        "SET lock_configuration = true"):
            self.con.execute(setting)
        self.lock = threading.Lock()

    def close(self) -> None:
        self.con.close()

    def tables(self) -> str:
        rows = [[t, self.con.execute(f"SELECT count(*) FROM {t}").fetchall()[0][0]] for t in TABLES]
        return "Tables of this job:\n" + render_table(["table", "rows"], rows)

    def schema(self, table: str) -> str:
        if table not in TABLES:
            raise QueryRefused(f"no table '{quoted(table, 60)}'. Tables: {', '.join(TABLES)}.")
        cols = self.con.execute("SELECT column_name, data_type FROM information_schema.columns "
                                "WHERE table_name = ? ORDER BY ordinal_position", [table]).fetchall()
        span = ""
        time_col = {"traces": "start"}.get(table, "timestamp")
        if any(c == time_col for c, _ in cols):
            first, last = self.con.execute(f"SELECT min({time_col}), max({time_col}) FROM {table}").fetchall()[0]
            span = f"\n{time_col} from {first} to {last}"
        sample = self.run(f"SELECT * FROM {table} LIMIT 3")
        return (f"Table {table}:\n" + render_table(["column", "type"], [list(c) for c in cols]) + span
                + "\nFirst rows:\n" + sample)

    def check(self, sql: str) -> None:
        """Refuse anything but exactly one SELECT statement."""
        try:
            statements = self.con.extract_statements(sql)
        except duckdb.Error as exc:
            raise QueryRefused(f"the query does not parse: {_first_line(exc)}. {HINT}") from None
        if len(statements) != 1:
            raise QueryRefused(f"{len(statements)} statements: send exactly one. {HINT}")
        if statements[0].type != duckdb.StatementType.SELECT:
            kind = str(statements[0].type).split(".")[-1]
            raise QueryRefused(f"{kind} statements are not allowed: the data is read-only. {HINT}")

    def run(self, sql: str) -> str:
        """The query's result as a table (at most row_limit rows), or QueryRefused with a message."""
        self.check(sql)
        timer = threading.Timer(self.timeout_s, self.con.interrupt)
        with self.lock:
            timer.start()
            try:
                cursor = self.con.execute(sql)
                columns = [d[0] for d in cursor.description or []]
                rows = cursor.fetchmany(self.row_limit + 1)
            except duckdb.InterruptException:
                raise QueryRefused(f"the query ran longer than {self.timeout_s:g} s and was stopped: filter "
                                   "by time or entity, or aggregate.") from None
            except duckdb.Error as exc:
                text = _first_line(exc)
                if "external access" in text.lower() or "file" in text.lower():
                    raise QueryRefused(f"files cannot be read here, only the job's tables. {HINT}") from None
                raise QueryRefused(f"the query failed: {text}") from None
            finally:
                timer.cancel()
        more = len(rows) > self.row_limit
        rows = rows[: self.row_limit]
        if not rows:
            return f"0 rows (columns: {', '.join(columns)})"
        body = render_table(columns, [[_cell(v) for v in r] for r in rows])
        return body + (f"\n(only the first {self.row_limit} rows are shown: aggregate or add LIMIT/WHERE)"
                       if more else f"\n{len(rows)} rows")


def _cell(value) -> str:
    if value is None:
        return "NULL"
    if not isinstance(value, str):
        return str(value)
    # escaped but not quoted: a string cell must not read as a SQL identifier ("...") to the model
    text = json.dumps(value, ensure_ascii=False)[1:-1]
    return text if len(text) <= CELL_MAX else text[: CELL_MAX - 1] + "~"


def _first_line(exc: Exception) -> str:
    return (str(exc).strip().splitlines() or ["error"])[0][:300]
