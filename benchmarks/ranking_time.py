"""Time of the evidence ranking (the overview, all signals) on the largest jobs of an import.

    python benchmarks/ranking_time.py --jobs ~/.cache/rcagent/work

Picks the job with the most rows, the job with the most spans and the slowest job of one ranking each, and
reports the median of three runs of loading the job (which includes the onset search where a table has no
baseline) and of ranking it on a loaded job (cold: its caches cleared each time).
"""
from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import duckdb

from rcagent.job import Job
from rcagent.tools.overview import ranking


def _rows(folder: Path, table: str | None = None) -> int:
    files = [folder / f"{table}.parquet"] if table else list(folder.glob("*.parquet"))
    con = duckdb.connect()
    n = sum(con.execute("SELECT count(*) FROM read_parquet(?)", [str(f)]).fetchall()[0][0] for f in files if f.exists())
    con.close()
    return n


def _median_seconds(action, runs: int = 3) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        action()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _once(folder: Path) -> float:
    job = Job.load(folder)
    start = time.perf_counter()
    ranking(job)
    job.con.close()
    return time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", required=True, help="an import DEST (holding jobs/)")
    jobs = sorted(p for p in (Path(ap.parse_args().jobs).expanduser() / "jobs").iterdir() if p.is_dir())
    largest = {"most rows": max(jobs, key=_rows), "most spans": max(jobs, key=lambda p: _rows(p, "traces")),
               # size alone does not predict the time: logs tied to spans by trace id cost the most
               "slowest of one run each": max(jobs, key=_once)}
    for what, folder in largest.items():
        load = _median_seconds(lambda: Job.load(folder).con.close())
        job = Job.load(folder)

        def rank():
            job.cache.clear()
            ranking(job)
        print(f"{what}: {folder.name} ({_rows(folder):,} rows, {_rows(folder, 'traces'):,} spans): "
              f"load {load:.2f} s, ranking {_median_seconds(rank):.2f} s (median of 3)")


if __name__ == "__main__":
    main()
