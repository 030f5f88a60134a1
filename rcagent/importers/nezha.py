"""Nezha (TrainTicket, Online Boutique) -> jobs.

Known problems handled (see shared/data/README.md):
- `inject_time` strings are UTC; `inject_timestamp` is wrong on 2023-01-29 and is never read.
- adservice metric files carry a bad `TimeStamp` column: every metric time comes from the `Time` string.
- Online Boutique lacks most log files and some trace files, and its fault-free phase has metrics only.
- A minute's trace and log files can repeat spans and lines of the minutes before (tt 15:44's trace file
  starts at 15:42:09): the same span id in the same trace, the same line to the nanosecond. Each is kept
  once, or the window's call and line counts would be those minutes' twice over.

The flagged window is the span of the case's three minute files: from the minute before the injection
minute to two minutes after it (so it never starts at the injection time); the baseline is the fault-free phase in construct_data plus the
minutes of metrics before the window (clipped at the previous case's window).
"""
from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import duckdb
from duckdb.sqltypes import VARCHAR

from rcagent.importers import (ImportReport, csv_view, find_dir, floor_minute, ident, iso, opaque_id,
                               write_job, write_label)
from rcagent.logline import level_of

METRIC_BASELINE_MINUTES = 10

# One-sentence reference texts per fault type, for the text metrics of the evaluation.
REFERENCE = {
    "cpu_contention": ("CPU contention injected on pod {pod} starved service {svc} of CPU, so its requests slowed down.",
                       "Relieve the contention on {pod}: stop the competing process, raise its CPU limit or reschedule it to a less loaded node."),
    "cpu_consumed": ("A CPU-hungry process inside pod {pod} consumed its CPU, slowing service {svc} and its callers.",
                     "Find and stop the CPU-consuming process in {pod}, then raise the CPU limit or scale out {svc}."),
    "network_delay": ("Network delay injected on pod {pod} added latency to the calls of service {svc}.",
                      "Remove the faulty traffic-control rule or repair the network path of {pod}, or reschedule it."),
    "return": ("A code fault in service {svc} (pod {pod}) made it return wrong results to its callers.",
               "Roll back or fix the faulty return path in {svc}{code} and redeploy it."),
    "exception": ("A code fault in service {svc} (pod {pod}) threw exceptions while handling requests.",
                  "Fix the exception in {svc}{code}, redeploy it, and restart {pod} meanwhile."),
}


def service_of(pod: str) -> str:
    """Pod name minus its ReplicaSet hash and pod suffix."""
    parts = pod.split("-")
    return "-".join(parts[:-2]) if len(parts) > 2 else pod


def _files(folder: Path, minutes: list[str], suffix: str) -> list[Path]:
    return [folder / f"{m}_{suffix}.csv" for m in minutes if (folder / f"{m}_{suffix}.csv").is_file()]


def _traces_sql(con, files: list[Path], view: str) -> str:
    if not files:
        return ("SELECT NULL::VARCHAR AS trace_id, NULL::VARCHAR AS span_id, NULL::VARCHAR AS parent_id, "
                "NULL::TIMESTAMP AS start, NULL::DOUBLE AS duration_ms, NULL::VARCHAR AS service, "
                "NULL::VARCHAR AS entity, NULL::VARCHAR AS operation, NULL::VARCHAR AS status WHERE false")
    return f"""
        SELECT TraceID AS trace_id, SpanID AS span_id,
               CASE WHEN ParentID = 'root' THEN NULL ELSE ParentID END AS parent_id,
               make_timestamp(CAST(CAST(StartTimeUnixNano AS HUGEINT) // 1000 AS BIGINT)) AS start,
               CAST(Duration AS DOUBLE) / 1000.0 AS duration_ms,
               regexp_replace(PodName, '-[^-]+-[^-]+$', '') AS service, PodName AS entity,
               OperationName AS operation, NULL AS status
        FROM {csv_view(con, view, files)}"""


def _logs_sql(con, files: list[Path], view: str) -> str:
    if not files:
        return ("SELECT NULL::TIMESTAMP AS timestamp, NULL::VARCHAR AS entity, NULL::VARCHAR AS level, "
                "NULL::VARCHAR AS message, NULL::VARCHAR AS trace_id, NULL::VARCHAR AS node WHERE false")
    return f"""
        SELECT make_timestamp(CAST(CAST(TimeUnixNano AS HUGEINT) // 1000 AS BIGINT)) AS timestamp, PodName AS entity,
               coalesce(level_of(msg), 'UNKNOWN') AS level,
               msg AS message, TraceID AS trace_id, Node AS node
        FROM (SELECT *, trim(coalesce(json_extract_string(Log, '$.log'), Log)) AS msg
              FROM {csv_view(con, view, files)})"""


def _extent(con, sql: str, col: str) -> tuple[dt.datetime, dt.datetime] | None:
    lo, hi = con.execute(f"SELECT min({col}), max({col}) FROM ({sql})").fetchall()[0]
    return (lo, hi) if lo is not None else None


def import_source(root: Path, dest: Path, progress=None, only: set[str] | None = None) -> ImportReport:
    """Every case of the source, or only the case ids in `only` (each case keeps the baseline it has in a
    full import)."""
    nezha = find_dir(root, "nezha")
    report = ImportReport("nezha")
    code_labels = {}
    for name in ("root_cause_ts.json", "root_cause_hipster.json"):
        f = nezha / "construct_data" / name
        if f.is_file():
            code_labels.update(json.loads(f.read_text()))
    days = sorted(p for p in (nezha / "rca_data").iterdir() if p.is_dir())
    for day_dir in days:
        _import_day(nezha, day_dir, dest, report, code_labels, progress, only)
    return report


def _load_day_metrics(con, metric_dir: Path) -> None:
    """Table day_metrics(timestamp, pod, metric, value): every pod's metrics of the day in long form, plus
    the front end's (front_service.csv) under the entity 'entry'. Time comes from the `Time` string
    (the `TimeStamp` column is wrong on one day)."""
    con.execute("CREATE TABLE day_metrics (timestamp TIMESTAMP, pod VARCHAR, metric VARCHAR, value DOUBLE)")
    sources = [(sorted(metric_dir.glob("*_metric.csv")), "PodName"), ([metric_dir / "front_service.csv"], "'entry'")]
    for files, pod_expr in sources:
        files = [f for f in files if f.is_file()]
        if not files:
            continue
        con.execute(f"""
            CREATE OR REPLACE TEMP TABLE wide AS
            SELECT * REPLACE (CAST(strptime(left("Time", 19), '%Y-%m-%d %H:%M:%S') AS TIMESTAMP) AS "Time")
            FROM {csv_view(con, "metric_files", files)}""")
        columns = [r[0] for r in con.execute("DESCRIBE wide").fetchall()
                   if r[0] not in ("Time", "TimeStamp", "PodName", "ServiceName")]
        con.execute(f"""
            INSERT INTO day_metrics
            SELECT "Time", {pod_expr}, metric, TRY_CAST(value AS DOUBLE)
            FROM (UNPIVOT wide ON {", ".join(ident(c) for c in columns)} INTO NAME metric VALUE value)
            WHERE TRY_CAST(value AS DOUBLE) IS NOT NULL AND NOT isnan(TRY_CAST(value AS DOUBLE))""")


def _import_day(nezha: Path, day_dir: Path, dest: Path, report: ImportReport, code_labels: dict,
                progress, only: set[str] | None = None) -> None:
    day = day_dir.name
    fault_file = day_dir / f"{day}-fault_list.json"
    if not fault_file.is_file():
        return
    cases = [c for hour in json.loads(fault_file.read_text()).values() for c in hour]
    for c in cases:  # inject_time is UTC; inject_timestamp is known to be wrong and never read
        c["time"] = dt.datetime.strptime(c["inject_time"], "%Y-%m-%d %H:%M:%S")
    cases.sort(key=lambda c: c["time"])
    if only is not None and not any(f"{day}_{c['time']:%H_%M}" in only for c in cases):
        return
    system = "TrainTicket" if any(c["inject_pod"].startswith("ts-") for c in cases) else "OnlineBoutique"
    prefix = "tt" if system == "TrainTicket" else "ob"
    con = duckdb.connect(":memory:")
    con.create_function("level_of", level_of, [VARCHAR], VARCHAR, null_handling="special", side_effects=False)
    con.execute("SET TimeZone = 'UTC'")
    metric_dir = day_dir / "metric"
    _load_day_metrics(con, metric_dir)
    dep_edges: list[tuple[str, str]] = []
    dep = metric_dir / "dependency.csv"
    if dep.is_file():
        dep_edges = con.execute(f"SELECT DISTINCT Source, Target FROM {csv_view(con, 'dependency', [dep])} "
                                "WHERE Source IS NOT NULL AND Target IS NOT NULL").fetchall()

    # Fault-free phase: traces and logs from construct_data; its period is a baseline for every table.
    free_dir = nezha / "construct_data" / day
    free_traces = _traces_sql(con, sorted((free_dir / "trace").glob("*_trace.csv")), "free_trace_files")
    free_logs = _logs_sql(con, sorted((free_dir / "log").glob("*_log.csv")), "free_log_files")
    spans = [e for e in (_extent(con, free_traces, "start"), _extent(con, free_logs, "timestamp")) if e]
    free_period = None
    if spans:
        lo, hi = min(s[0] for s in spans), max(s[1] for s in spans)
        free_period = (floor_minute(lo), floor_minute(hi) + dt.timedelta(minutes=1))
    day_start = con.execute("SELECT min(timestamp) FROM day_metrics").fetchall()[0][0]

    prev_end = None
    for i, case in enumerate(cases):
        inject: dt.datetime = case["time"]
        pod = case["inject_pod"]
        svc = service_of(pod)
        minute = inject.strftime("%H_%M")
        minutes = [(floor_minute(inject) + dt.timedelta(minutes=k)).strftime("%H_%M") for k in range(3)]
        # The minute files run from about a minute before the injection to two minutes after it.
        start = floor_minute(inject) - dt.timedelta(minutes=1)
        end = floor_minute(inject) + dt.timedelta(minutes=3)
        base_start = start - dt.timedelta(minutes=METRIC_BASELINE_MINUTES)
        if prev_end is not None and prev_end > base_start:
            base_start = prev_end
        if day_start is not None and day_start > base_start:
            base_start = day_start
        baseline = []
        if base_start < start:
            baseline.append({"start": iso(base_start), "end": iso(start), "tables": ["metrics"]})
        if free_period and not (free_period[0] < end and start < free_period[1]):
            baseline.append({"start": iso(free_period[0]), "end": iso(free_period[1]),
                             "tables": ["metrics", "traces", "logs"]})
        prev_end = end
        case_id = f"{day}_{minute}"
        job_id = opaque_id(prefix, "nezha", case_id)
        if only is not None and case_id not in only:
            continue
        with report.case(dest, case_id, job_id):
            trace_sql = _traces_sql(con, _files(day_dir / "trace", minutes, "trace"), "case_trace_files")
            log_sql = _logs_sql(con, _files(day_dir / "log", minutes, "log"), "case_log_files")

            all_traces = f"SELECT * FROM ({trace_sql}) UNION ALL BY NAME SELECT * FROM ({free_traces})" \
                if free_period else trace_sql
            all_logs = f"SELECT * FROM ({log_sql}) UNION ALL BY NAME SELECT * FROM ({free_logs})" \
                if free_period else log_sql
            con.execute(f"CREATE OR REPLACE TEMP TABLE t AS SELECT DISTINCT * FROM ({all_traces})")
            con.execute(f"CREATE OR REPLACE TEMP TABLE l AS SELECT DISTINCT * FROM ({all_logs})")
            periods = [(start, end)] + [(dt.datetime.fromisoformat(b['start'][:-1]), dt.datetime.fromisoformat(b['end'][:-1]))
                                        for b in baseline]
            cond = " OR ".join(f"(timestamp >= TIMESTAMP '{a}' AND timestamp < TIMESTAMP '{b}')" for a, b in periods)
            # Pod -> node, as the logs show it; node-level metrics then belong to the node entity.
            has_logs = con.execute("SELECT count(*) FROM l").fetchall()[0][0] > 0
            node_of = dict(con.execute("SELECT entity, any_value(node) FROM l WHERE node IS NOT NULL GROUP BY entity")
                           .fetchall()) if has_logs else {}
            con.execute("CREATE OR REPLACE TEMP TABLE node_map AS SELECT * FROM (VALUES ('', '')) v(pod, node) WHERE false")
            if node_of:
                con.executemany("INSERT INTO node_map VALUES (?, ?)", list(node_of.items()))
            metrics_sql = f"""
                SELECT timestamp, CASE WHEN metric LIKE 'Node%' AND n.node IS NOT NULL THEN n.node ELSE m.pod END AS entity,
                       metric, avg(value) AS value
                FROM day_metrics m LEFT JOIN node_map n ON m.pod = n.pod
                WHERE {cond}
                GROUP BY ALL"""
            pods = {r[0] for r in con.execute(
                "SELECT DISTINCT pod FROM day_metrics WHERE pod <> 'entry' UNION SELECT DISTINCT entity FROM t "
                "UNION SELECT DISTINCT entity FROM l").fetchall() if r[0]}
            entities = [(p, "pod", service_of(p), node_of.get(p)) for p in sorted(pods)]
            entities += [(s, "service", s, None) for s in sorted({service_of(p) for p in pods})]
            entities += [(n, "node", None, n) for n in sorted(set(node_of.values()))]
            entities.append(("entry", "entry", None, None))
            calls = set(con.execute("""
                SELECT DISTINCT p.service, c.service FROM t c JOIN t p ON c.parent_id = p.span_id AND c.trace_id = p.trace_id
                WHERE p.service <> c.service""").fetchall()) if con.execute("SELECT count(*) FROM t").fetchall()[0][0] else set()
            services = {service_of(p) for p in pods}
            calls |= {(a, b) for a, b in dep_edges if a in services and b in services}
            relations = [(a, b, "calls") for a, b in sorted(calls)]
            relations += [(p, service_of(p), "instance_of") for p in sorted(pods)]
            relations += [(p, n, "runs_on") for p, n in sorted(node_of.items())]
            con.execute("CREATE OR REPLACE TEMP TABLE ents AS SELECT * FROM (VALUES ('', '', '', '')) v(id, kind, service, node) WHERE false")
            con.executemany("INSERT INTO ents VALUES (?, ?, ?, ?)", entities)
            con.execute("CREATE OR REPLACE TEMP TABLE rels AS SELECT * FROM (VALUES ('', '', '')) v(src, dst, kind) WHERE false")
            con.executemany("INSERT INTO rels VALUES (?, ?, ?)", relations)

            meta = {
                "system": system, "source": "nezha",
                "alert": _alert(con, system, start, end, baseline),
                "window": {"start": iso(start), "end": iso(end)},
                "baseline": baseline,
            }
            rows = write_job(con, dest, job_id, meta, {
                "entities": "SELECT * FROM ents", "relations": "SELECT * FROM rels",
                "metrics": metrics_sql,
                "traces": f"SELECT * FROM t WHERE (start >= TIMESTAMP '{start}' AND start < TIMESTAMP '{end}') OR "
                          + (f"(start >= TIMESTAMP '{free_period[0]}' AND start < TIMESTAMP '{free_period[1]}')" if free_period else "false"),
                "logs": f"SELECT timestamp, entity, level, message, trace_id FROM l WHERE {cond}",
            })
            code = code_labels.get(svc, {}).get(case["inject_type"], "")
            code_hint = f" ({code.replace('_', ', ')})" if "#" in code else ""
            text, fix = REFERENCE.get(case["inject_type"], ("Fault {t} injected on pod {pod} of service {svc}.",
                                                            "Remove the injected fault from {pod}."))
            write_label(dest, job_id, {
                "case_id": case_id, "source": "nezha", "system": system,
                "root_causes": [{"entity": pod, "level": "pod", "service": svc}],
                "fault_type": case["inject_type"], "inject_time": iso(inject),
                "root_cause": text.format(pod=pod, svc=svc, t=case["inject_type"]),
                "solution": fix.format(pod=pod, svc=svc, code=code_hint),
                **({"code_location": code} if "#" in code else {}),
            })
            report.add(job_id, system, rows)
        if progress:
            progress(job_id, i + 1, len(cases))


def _alert(con, system: str, start: dt.datetime, end: dt.datetime, baseline: list[dict]) -> str:
    """What monitoring shows at the entry point: latency and success rate, window against baseline."""
    base = " OR ".join(f"(timestamp >= TIMESTAMP '{b['start'][:-1]}' AND timestamp < TIMESTAMP '{b['end'][:-1]}')"
                       for b in baseline if "metrics" in b["tables"]) or "false"
    rows = con.execute(f"""
        SELECT metric, median(value) FILTER (WHERE {base}),
               max(value) FILTER (WHERE timestamp >= TIMESTAMP '{start}' AND timestamp < TIMESTAMP '{end}'),
               min(value) FILTER (WHERE timestamp >= TIMESTAMP '{start}' AND timestamp < TIMESTAMP '{end}')
        FROM day_metrics WHERE pod = 'entry' GROUP BY metric""").fetchall()
    stats = {m: (b, hi, lo) for m, b, hi, lo in rows}
    parts = []
    for metric in ("LatencyP90(s)", "LatencyP99(s)"):
        if metric in stats and stats[metric][0] is not None and stats[metric][1] is not None:
            b, hi, _ = stats[metric]
            parts.append(f"{metric.replace('(s)', '')} peaked at {hi:.3f} s (baseline median {b:.3f} s)")
    if "SuccessRate(%)" in stats and stats["SuccessRate(%)"][2] is not None and stats["SuccessRate(%)"][0] is not None:
        b, _, lo = stats["SuccessRate(%)"]
        if b or lo:  # the series reads 0 throughout on some days: then it says nothing
            parts.append(f"success rate fell to {lo:.1f}% (baseline median {b:.1f}%)")
    detail = "; ".join(parts) if parts else "latency and success-rate anomaly"
    return (f"{system} entry service (front end) flagged between {start:%H:%M} and {end:%H:%M} UTC: {detail}.")
