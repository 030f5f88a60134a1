"""Small helpers for the evidence tests: a table written as Parquet into a job, a real job copied with
tables rewritten, a real job's labelled culprit."""
from __future__ import annotations

import shutil
from pathlib import Path

import duckdb
import yaml


def write_table(job: Path, table: str, columns: str, rows: list[tuple]) -> None:
    con = duckdb.connect()
    con.execute(f"CREATE TABLE {table} ({columns})")
    con.executemany(f"INSERT INTO {table} VALUES ({', '.join('?' * len(rows[0]))})", rows)
    con.table(table).write_parquet(str(job / f"{table}.parquet"))
    con.close()


def with_tables(src: Path, dst: Path, **selects: str) -> Path:
    """A copy of the job `src` in `dst` whose tables hold what their `select` gives; each reads its original
    as `original` (`SELECT * REPLACE (...) FROM original`). Files go through DuckDB's relational API, so a
    path is never SQL text."""
    shutil.copytree(src, dst)
    for table, select in selects.items():
        con = duckdb.connect()
        con.read_parquet(str(src / f"{table}.parquet")).create_view("original")
        con.sql(select).write_parquet(str(dst / f"{table}.parquet"))
        con.close()
    return dst


def culprit_of(path: Path) -> tuple[str, str]:
    lab = yaml.safe_load((path.parent.parent / "labels" / f"{path.name}.yaml").read_text())
    return lab["root_causes"][0]["entity"], lab["root_causes"][0]["service"]
