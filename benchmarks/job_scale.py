"""How load and ranking time grow with a job's size: a real job made K times larger, two ways.

    python benchmarks/job_scale.py --job ~/.cache/rcagent/work/jobs/tt-be2a4331 [--factors 1,4,16]

The shared jobs are small (at most about 70,000 spans); an operator's incident can hold millions of spans
and log lines. From one real job, copies are written to a temp folder (never into the job):
- traffic xK: every span and log line K times, each copy with its own trace and span ids and its time moved
  by a few milliseconds (K times the requests through the same entities; metrics as they are);
- breadth xK: the whole system K times, every entity, relation, series, span and line renamed per copy
  (K times the entities, as in a system K times larger).
Each copy is loaded (with redaction, as `rcagent analyze` does) and ranked, cold, three times, in a process
of its own; the medians and that process's peak memory are reported, with the ranking's time as a ratio
to x1 measured in the same run. Time that grows faster than the factor is a defect to find. The first
answer is shown, not scored: K exact copies of each request make every count K times larger with no more
noise, so a chance difference of the original reads as a certain one (more traffic of the same kind
would not).
"""
from __future__ import annotations

import argparse
import multiprocessing
import shutil
import statistics
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import duckdb
import yaml

from rcagent.job import SCHEMAS, Job
from rcagent.tools.overview import ranking

RUNS = 3


def _traffic(table: str, cols: list[str]) -> str:
    """SELECT of the table once per row of `copies`, each copy with its own ids and its times moved by i
    milliseconds. `cols` are the job schema's own column names, never the file's text."""
    def col(c: str) -> str:
        if c in ("trace_id", "span_id", "parent_id"):
            return f"CASE WHEN i = 0 OR {c} IS NULL OR {c} = '' THEN {c} ELSE {c} || '.' || i END AS {c}"
        if c in ("start", "timestamp") and table in ("traces", "logs"):
            return f"{c} + to_milliseconds(i) AS {c}"
        return c
    if table not in ("traces", "logs"):
        return f"SELECT {', '.join(cols)} FROM t"
    return f"SELECT {', '.join(col(c) for c in cols)} FROM t, copies"


def _breadth(table: str, cols: list[str]) -> str:
    """SELECT of the table once per row of `copies`, each copy's entity names (and ids) suffixed with its
    number."""
    renamed = {"entities": ("id", "service", "node"), "relations": ("src", "dst"),
               "metrics": ("entity",), "logs": ("entity", "trace_id"), "events": ("entity",),
               "traces": ("entity", "service", "trace_id", "span_id", "parent_id")}.get(table, ())

    def col(c: str) -> str:
        if c in renamed:
            return f"CASE WHEN i = 0 OR {c} IS NULL OR {c} = '' THEN {c} ELSE {c} || '-x' || i END AS {c}"
        return c
    return f"SELECT {', '.join(col(c) for c in cols)} FROM t, copies"


def scaled(job: Path, dest: Path, k: int, how: str) -> Path:
    """A copy of `job` in dest, K times larger by `how` (traffic or breadth)."""
    out = dest / f"{job.name}-{how}-x{k}"
    out.mkdir(parents=True)
    shutil.copy(job / "job.yaml", out / "job.yaml")
    meta = yaml.safe_load((job / "job.yaml").read_text())
    assert not meta.get("tables"), "jobs with declared file names are not supported here"
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    con.execute("CREATE TABLE copies (i BIGINT)")
    con.executemany("INSERT INTO copies VALUES (?)", [[i] for i in range(k)])
    for file in sorted(job.glob("*.parquet")):
        table = file.stem
        if table not in SCHEMAS:
            continue
        rel = con.read_parquet(str(file))
        rel.create_view("t", replace=True)
        cols = [c for c in SCHEMAS[table] if c in rel.columns]   # what Job.load reads of the file
        sql = _traffic(table, cols) if how == "traffic" else _breadth(table, cols)
        con.sql(sql).write_parquet(str(out / file.name))
    con.close()
    return out


def _rows(folder: Path) -> dict[str, int]:
    con = duckdb.connect()
    rows = {f.stem: con.execute("SELECT count(*) FROM read_parquet(?)", [str(f)]).fetchall()[0][0]
            for f in folder.glob("*.parquet")}
    con.close()
    return rows


def _peak_mib() -> float:
    """This process's peak resident memory since it started (VmHWM; getrusage's maxrss would carry over the
    parent's peak across the exec that started it)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def measure(folder: Path) -> tuple[float, float, str, float]:
    """Median load and cold ranking time, the first answer and the peak memory (MiB) of this process."""
    loads, ranks, first = [], [], ""
    for _ in range(RUNS):
        start = time.perf_counter()
        job = Job.load(folder)
        loads.append(time.perf_counter() - start)
        start = time.perf_counter()
        ranked = ranking(job)
        ranks.append(time.perf_counter() - start)
        first = ranked[0][0] if ranked else "(none)"
        job.con.close()
    return statistics.median(loads), statistics.median(ranks), first, _peak_mib()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--job", required=True, help="a job folder (Parquet tables)")
    ap.add_argument("--factors", default="1,4,16", help="comma-separated K")
    ap.add_argument("--how", default="traffic,breadth", help="traffic, breadth or both")
    args = ap.parse_args()
    job = Path(args.job).expanduser()
    factors = [int(k) for k in args.factors.split(",")]
    print("| how | K | spans | log lines | entities | load s | ranking s | ranking / x1 | peak RSS MiB | first answer |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for how in args.how.split(","):
            base = None
            for k in factors:
                folder = scaled(job, Path(tmp), k, how)
                rows = _rows(folder)
                with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
                    load, rank, first, rss = pool.submit(measure, folder).result()   # its own peak memory
                base = base or rank
                print(f"| {how} | {k} | {rows.get('traces', 0):,} | {rows.get('logs', 0):,} | "
                      f"{rows.get('entities', 0):,} | {load:.2f} | {rank:.2f} | {rank / base:.1f} | {rss:.0f} | "
                      f"{first} |", flush=True)
                shutil.rmtree(folder)


if __name__ == "__main__":
    main()
