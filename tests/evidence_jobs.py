"""Small helpers for the evidence tests: a table written as Parquet into a job, a real job's labelled culprit."""
from __future__ import annotations

from pathlib import Path

import duckdb
import yaml


def write_table(job: Path, table: str, columns: str, rows: list[tuple]) -> None:
    con = duckdb.connect()
    con.execute(f"CREATE TABLE {table} ({columns})")
    con.executemany(f"INSERT INTO {table} VALUES ({', '.join('?' * len(rows[0]))})", rows)
    con.table(table).write_parquet(str(job / f"{table}.parquet"))
    con.close()


def culprit_of(path: Path) -> tuple[str, str]:
    lab = yaml.safe_load((path.parent.parent / "labels" / f"{path.name}.yaml").read_text())
    return lab["root_causes"][0]["entity"], lab["root_causes"][0]["service"]
