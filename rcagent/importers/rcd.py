"""RCD SockShop -> jobs.

Each case folder `<service>-<fault>/<run>/` (cpu or mem in the shared archive; the service is the longest
leading part of the name that names a service of the case, so `front-end-disk-io` reads too) holds
`normal.csv` (a separate normal period, the baseline; a run without it has none) and `anomalous.csv` (the
fault period, the flagged window), one row a second, columns `<svc>_<metric>`. The folder name is the
answer, so job ids are opaque. The data shows no calls: relations stay empty.
"""
from __future__ import annotations

import datetime as dt
from pathlib import Path

import duckdb

from rcagent.errors import BadInput
from rcagent.importers import ImportReport, csv_view, find_dir, ident, iso, opaque_id, write_job, write_label

METRICS = ("cpu", "mem", "lod", "lat_50", "lat_90", "lat_99")
REFERENCE = {
    "cpu": ("A CPU hog injected into service {svc} saturated its CPU and slowed its requests.",
            "Stop the CPU-hungry process in {svc}, then raise its CPU limit or scale it out."),
    "mem": ("A memory hog injected into service {svc} exhausted its memory and degraded its requests.",
            "Stop the memory-hungry process in {svc} (or restart it), then raise its memory limit."),
}


def _split(column: str) -> tuple[str, str] | None:
    for metric in sorted(METRICS, key=len, reverse=True):
        if column.endswith("_" + metric):
            return column[: -len(metric) - 1], metric
    return None


def _service_and_fault(folder: str, names: list[str]) -> tuple[str, str]:
    """A case folder's `<service>-<fault>` parts: the longest leading part that names a service of the case
    (`front-end-cpu`, a fault such as `disk-io` after it), else the part before the last dash."""
    dashes = [i for i, c in enumerate(folder) if c == "-"]
    for i in reversed(dashes):
        if folder[:i] in names:
            return folder[:i], folder[i + 1:]
    svc, _, fault = folder.rpartition("-")
    return (svc, fault) if svc else (folder, "unknown")


def _kind(name: str) -> str:
    if name.endswith("-db"):
        return "database"
    if name in ("rabbitmq",):
        return "queue"
    return "service"


def import_source(root: Path, dest: Path, progress=None) -> ImportReport:
    data = find_dir(root, "sock-shop-data")
    report = ImportReport("rcd")
    cases = sorted(p for p in data.glob("*/*") if (p / "anomalous.csv").is_file())
    con = duckdb.connect(":memory:")
    con.execute("SET TimeZone = 'UTC'")
    for i, case in enumerate(cases):
        case_id = f"{case.parent.name}/{case.name}"
        job_id = opaque_id("ss", "rcd", case_id)
        with report.case(dest, case_id, job_id):
            periods = {}
            for part in ("normal", "anomalous"):
                f = case / f"{part}.csv"
                # a part the case lacks is empty, never the previous case's table of the same name
                con.execute(f"CREATE OR REPLACE TEMP TABLE m_{part} (timestamp TIMESTAMP, col VARCHAR, value DOUBLE)")
                if not f.is_file():
                    continue
                con.execute(f"CREATE OR REPLACE TEMP TABLE w_{part} AS SELECT * FROM {csv_view(con, 'case_file', [f])}")
                header = [r[0] for r in con.execute(f"DESCRIBE w_{part}").fetchall()]
                if "time" not in header:
                    raise BadInput(f"{f.name}: has no column 'time' (its header begins {', '.join(header[:3])})")
                cols = [c for c in header if c != "time"]
                con.execute(f"""
                    CREATE OR REPLACE TEMP TABLE m_{part} AS
                    SELECT make_timestamp(CAST(CAST("time" AS DOUBLE) * 1e6 AS BIGINT)) AS timestamp,
                           col, TRY_CAST(value AS DOUBLE) AS value
                    FROM (UNPIVOT w_{part} ON {", ".join(ident(c) for c in cols)} INTO NAME col VALUE value)
                    WHERE TRY_CAST(value AS DOUBLE) IS NOT NULL AND NOT isnan(TRY_CAST(value AS DOUBLE))""")
                lo, hi = con.execute(f"SELECT min(timestamp), max(timestamp) FROM m_{part}").fetchall()[0]
                if lo is not None:
                    periods[part] = (lo, hi + dt.timedelta(seconds=1))
            if "anomalous" not in periods:
                raise BadInput(f"{case}: anomalous.csv holds no sample with a time and a number")
            mapping = [(c, *_split(c)) for (c,) in con.execute(
                "SELECT DISTINCT col FROM m_anomalous UNION SELECT DISTINCT col FROM m_normal").fetchall() if _split(c)]
            names = sorted({m[1] for m in mapping})
            svc, fault = _service_and_fault(case.parent.name, names)
            con.execute("CREATE OR REPLACE TEMP TABLE colmap AS SELECT * FROM (VALUES ('', '', '')) v(col, entity, metric) WHERE false")
            con.executemany("INSERT INTO colmap VALUES (?, ?, ?)", mapping)
            con.execute("CREATE OR REPLACE TEMP TABLE ents AS SELECT * FROM (VALUES ('', '', '', '')) v(id, kind, service, node) WHERE false")
            con.executemany("INSERT INTO ents VALUES (?, ?, ?, NULL)", [(n, _kind(n), n) for n in names])
            start, end = periods["anomalous"]
            meta = {
                "system": "SockShop", "source": "rcd",
                "alert": (f"SockShop performance alert between {start:%Y-%m-%d %H:%M:%S} and {end:%H:%M:%S} UTC: "
                          "request latency and resource usage departed from normal; per-second container "
                          "metrics (cpu, mem, load, latency) are attached."),
                "window": {"start": iso(start), "end": iso(end)},
                "baseline": [{"start": iso(periods["normal"][0]), "end": iso(periods["normal"][1]),
                              "tables": ["metrics"]}] if "normal" in periods else [],
            }
            rows = write_job(con, dest, job_id, meta, {
                "entities": "SELECT * FROM ents",
                "metrics": """SELECT timestamp, c.entity, c.metric, value FROM
                              (SELECT * FROM m_normal UNION ALL SELECT * FROM m_anomalous) m JOIN colmap c USING (col)""",
            })
            text, fix = REFERENCE.get(fault, ("A {fault} fault injected into service {svc} degraded its requests.",
                                              "Remove the {fault} fault from {svc}, or restart it, and check its limits."))
            write_label(dest, job_id, {
                "case_id": case_id, "source": "rcd", "system": "SockShop",
                "root_causes": [{"entity": svc, "level": "service", "service": svc}],
                "fault_type": fault, "root_cause": text.format(svc=svc, fault=fault),
                "solution": fix.format(svc=svc, fault=fault),
            })
            report.add(job_id, "SockShop", rows)
        if progress:
            progress(job_id, i + 1, len(cases))
    return report
