"""Small helpers for the evidence tests: a table written as Parquet into a job, a real job copied with a
table rewritten, a real job's labelled culprit."""
from __future__ import annotations

from pathlib import Path

import shutil

import duckdb
import yaml


def write_table(job: Path, table: str, columns: str, rows: list[tuple]) -> None:
    con = duckdb.connect()
    con.execute(f"CREATE TABLE {table} ({columns})")
    con.executemany(f"INSERT INTO {table} VALUES ({', '.join('?' * len(rows[0]))})", rows)
    con.table(table).write_parquet(str(job / f"{table}.parquet"))
    con.close()


def with_table(src: Path, dst: Path, table: str, select: str) -> Path:
    """A copy of the job `src` in `dst` whose `table` holds what `select` gives; `select` reads the original
    as `{table}` (`SELECT * REPLACE (...) FROM {table}`)."""
    shutil.copytree(src, dst)
    (dst / f"{table}.parquet").unlink()
    original = f"read_parquet('{src / f'{table}.parquet'}')"
    duckdb.execute(f"COPY ({select.format(table=original)}) TO '{dst / f'{table}.parquet'}'")
    return dst


def culprit_of(path: Path) -> tuple[str, str]:
    lab = yaml.safe_load((path.parent.parent / "labels" / f"{path.name}.yaml").read_text())
    return lab["root_causes"][0]["entity"], lab["root_causes"][0]["service"]
