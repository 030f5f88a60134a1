"""AWS PetSite (PetShop) -> jobs.

Each `issue_N/metrics.csv` has four header rows (microservice, metric, statistic, unix_timestamp) and five
rows five minutes apart: the flagged window. The baseline is `noissue/metrics.csv` of the same traffic
level, a separate period of normal operation; its columns are matched by (microservice, metric, statistic).
Relations come from `graph.csv` (the call-graph adjacency matrix). The fault type is read from the
reproduction command in the metadata.
"""
from __future__ import annotations

import csv
import datetime as dt
import json
import math
from pathlib import Path

import duckdb
import pyarrow as pa

from rcagent.importers import ImportReport, find_dir, iso, opaque_id, write_job, write_label

STEP = dt.timedelta(minutes=5)


def _kind(name: str) -> str:
    if "Lambda" in name or name.startswith("lambda_"):
        return "function"
    if "DynamoDB" in name or "Database" in name or "PGSQL" in name or "S3" in name:
        return "database"
    if "SQS" in name or "SimpleNotificationService" in name:
        return "queue"
    if name.endswith("_remote"):
        return "external"
    if name.endswith("_client"):   # X-Ray's client node: the callers outside the application, its users
        return "entry"
    return "service"


def _fault(command: str) -> str:
    c = command.lower()
    if "delay" in c or "sleep" in c:
        return "latency"
    if "error" in c or "inject = true" in c:
        return "errors"
    if "dynamo" in c:
        return "request_overload"
    return "unknown"


REFERENCE = {
    "latency": ("An injected delay in {e} made it slow, raising the latency of PetSite requests that depend on it.",
                "Remove the injected delay from {e} (revert the configuration or code change) and redeploy."),
    "errors": ("An injected error mode in {e} made it fail a share of its requests, lowering PetSite availability.",
               "Turn off the error mode in {e} (revert the parameter or code change) and redeploy."),
    "request_overload": ("A burst of requests overloaded {e}, throttling it and slowing its callers.",
                         "Throttle or spread the burst of requests to {e} and raise its provisioned capacity."),
    "unknown": ("A fault in {e} degraded PetSite.", "Revert the change to {e}."),
}


def _number(name: str) -> int:
    """The N of `issue_N` (0 for a name without one), to take the cases in their order."""
    digits = name.rpartition("_")[2]
    return int(digits) if digits.isdigit() else 0


def _read_metrics(path: Path) -> list[tuple[dt.datetime, str, str, float]]:
    rows = list(csv.reader(path.open()))
    names, metrics, stats = rows[0], rows[1], rows[2]
    out = []
    for row in rows[4:]:
        if not row or not row[0]:
            continue
        ts = dt.datetime.fromtimestamp(float(row[0]), dt.timezone.utc).replace(tzinfo=None)
        for j in range(1, len(row)):
            if row[j] == "":
                continue
            value = float(row[j])
            if math.isnan(value):
                continue
            out.append((ts, names[j], f"{metrics[j]}_{stats[j].lower()}", value))
    return out


def import_source(root: Path, dest: Path, progress=None) -> ImportReport:
    data = find_dir(root, "dataset")
    report = ImportReport("petshop")
    cases = sorted(data.glob("*/*/issue_*/target.json"),
                   key=lambda p: (p.parts[-4], p.parts[-3], _number(p.parent.name)))
    con = duckdb.connect(":memory:")
    con.execute("SET TimeZone = 'UTC'")
    normal_cache: dict[Path, list] = {}
    for i, target_file in enumerate(cases):
        case = target_file.parent
        traffic_dir = case.parent.parent
        case_id = f"{traffic_dir.name}/{case.parent.name}/{case.name}"
        job_id = opaque_id("ps", "petshop", case_id)
        with report.case(dest, case_id, job_id):
            target = json.loads(target_file.read_text())
            flagged = _read_metrics(case / "metrics.csv")
            normal_file = traffic_dir / "noissue" / "metrics.csv"
            if normal_file not in normal_cache:
                normal_cache[normal_file] = _read_metrics(normal_file) if normal_file.is_file() else []
            normal = normal_cache[normal_file]
            names = sorted({r[1] for r in flagged} | {r[1] for r in normal})
            edges = []
            graph = traffic_dir / "graph.csv"
            if graph.is_file():
                grid = list(csv.reader(graph.open()))
                cols = grid[0][1:]
                for row in grid[1:]:
                    for j, cell in enumerate(row[1:]):
                        if cell and float(cell) > 0:
                            edges.append((row[0], cols[j], "calls"))
                names = sorted(set(names) | {e[0] for e in edges} | {e[1] for e in edges})
            rows_all = flagged + normal
            m = pa.table({"timestamp": pa.array([r[0] for r in rows_all], pa.timestamp("us")),
                          "entity": [r[1] for r in rows_all], "metric": [r[2] for r in rows_all],
                          "value": pa.array([r[3] for r in rows_all], pa.float64())})
            con.register("m", m)
            con.execute("CREATE OR REPLACE TEMP TABLE ents (id VARCHAR, kind VARCHAR, service VARCHAR, node VARCHAR)")
            con.executemany("INSERT INTO ents VALUES (?, ?, ?, NULL)", [(n, _kind(n), n) for n in names])
            con.execute("CREATE OR REPLACE TEMP TABLE rels (src VARCHAR, dst VARCHAR, kind VARCHAR)")
            if edges:
                con.executemany("INSERT INTO rels VALUES (?, ?, ?)", edges)
            start = min(r[0] for r in flagged)
            end = max(r[0] for r in flagged) + STEP
            t = target["target"]
            alert_at = dt.datetime.fromtimestamp(t["timestamp"], dt.timezone.utc).strftime("%Y-%m-%d %H:%M")
            meta = {
                "system": "PetSite", "source": "petshop",
                "alert": (f"CloudWatch alarm on PetSite: {t['metric']} ({t.get('agg', '')}) of {t['node']} "
                          f"is anomalous around {alert_at} UTC ({traffic_dir.name.replace('_', ' ')})."),
                "window": {"start": iso(start), "end": iso(end)},
                "baseline": ([{"start": iso(min(r[0] for r in normal)), "end": iso(max(r[0] for r in normal) + STEP),
                               "tables": ["metrics"]}] if normal else []),
            }
            rows = write_job(con, dest, job_id, meta, {
                "entities": "SELECT * FROM ents", "relations": "SELECT * FROM rels", "metrics": "SELECT * FROM m"})
            culprit = target["root_cause"]["node"]
            fault = _fault(target.get("metadata", {}).get("reproducibility", {}).get("command", ""))
            text, fix = REFERENCE[fault]
            write_label(dest, job_id, {
                "case_id": case_id, "source": "petshop", "system": "PetSite",
                "root_causes": [{"entity": culprit, "level": "service", "service": culprit}],
                "fault_type": fault, "root_cause": text.format(e=culprit), "solution": fix.format(e=culprit),
            })
            report.add(job_id, "PetSite", rows)
        if progress:
            progress(job_id, i + 1, len(cases))
    return report
