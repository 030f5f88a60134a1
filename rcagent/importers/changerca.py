"""ChangeRCA (Online Boutique, incidents caused by a defective rollout) -> jobs.

Each case `changerca/data/<day>/<case>/` rolls out a new version (v2) of one to six services, one pod at a
time; one rollout is defective (the label), the others are harmless changes. What a job gets:
- entities: services (dependency.csv and the pod files), pods (named with their version, v1 or v2), the
  node IPs dependency.csv lists; relations: calls, pod instance_of service, service runs_on node;
- metrics, one row a minute: per pod `latency`, `cpu_usage_rate(%)`, `memory_usage_rate(%)`,
  `node_cpu_usage_rate(%)`; per pod and call edge `success_rate(%) CALLER->CALLEE` and
  `latency_p90_s CALLER->CALLEE` (the column the files call NodeMemoryUsageRate(%) holds that latency);
  per service the edge success rates seen by the caller (`success_rate(%) to CALLEE`) and by the callee
  (`success_rate(%) from CALLER`);
- events: the rollout plan of every changed service alike (rollout started; each pod created and deleted),
  as an operator's change log holds it: nothing in it says which change is defective;
- window: 8 minutes either side of the alert (detect_time); baseline: the experiment start to the window.

Never passed to a job: the fault type, which service is defective, the harmless list as such, the plan's
per-service `fault` field, and the dataset authors' own method outputs (`*_result`, `spicious_set_gied`).

Known problems handled (shared/data/README.md): a deleted v1 pod's file often continues with the values
of the v2 pod that replaced it, so a pod's rows after its deletion are dropped; pods created by the change
have no rows before it (the evidence layer must compare them with their peers).
"""
from __future__ import annotations

import datetime as dt
import json
import re
from pathlib import Path

import duckdb

from rcagent.importers import ImportReport, csv_view, find_dir, iso, opaque_id, write_job, write_label

WINDOW = dt.timedelta(minutes=8)
POD = re.compile(r"^(?P<service>.+?)-(?P<version>v\d+)-[0-9a-z]+-[0-9a-z]+$")
FILE = re.compile(r"^(?P<pod>.+-v\d+-[0-9a-z]+-[0-9a-z]+)_(?P<caller>[a-z0-9-]+)_(?P<callee>[a-z0-9-]+)\.csv$")
IP = re.compile(r"^\d{1,3}(\.\d{1,3}){3}$")
POD_COLUMNS = {"Latency": "latency", "CPUUsageRate(%)": "cpu_usage_rate(%)",
               "MemoryUsageRate(%)": "memory_usage_rate(%)", "NodeCpuUsageRate(%)": "node_cpu_usage_rate(%)"}
EDGE_COLUMNS = {"SuccessRate": "success_rate(%)", "NodeMemoryUsageRate(%)": "latency_p90_s"}

# One-sentence reference texts per defect type, for the text metrics of the evaluation.
REFERENCE = {
    "exception": "The new version of {svc} throws exceptions while handling requests, so its callers fail.",
    "memoryleak": "The new version of {svc} leaks memory, degrading and eventually failing its requests.",
    "scaledown": "The change to {svc} scaled it down below what its load needs, so its requests slow and fail.",
    "redis": "The new version of {svc} mishandles its Redis connection, so its requests fail.",
    "inconsistent": "The new version of {svc} is inconsistent with its callers' interface, so their calls fail.",
    "wrongvalue": "The new version of {svc} returns wrong values to its callers.",
    "misspara": "The new version of {svc} is deployed with a missing or wrong parameter, so its requests fail.",
    "access": "The new version of {svc} is denied access to what it needs, so its requests fail.",
    "return": "The new version of {svc} returns wrong results to its callers.",
    "wrongsql": "The new version of {svc} issues a wrong SQL query, so its requests fail.",
}
SOLUTION = "Roll back the rollout of {svc} to its previous version, then fix the defect before releasing again."


def service_of(pod: str) -> str:
    m = POD.match(pod)
    return m.group("service") if m else pod


def _utc(epoch: float) -> dt.datetime:
    return dt.datetime.fromtimestamp(epoch, dt.timezone.utc).replace(tzinfo=None)


def _time(text: str) -> dt.datetime:
    return dt.datetime.strptime(text, "%Y-%m-%d %H:%M:%S")


def import_source(root: Path, dest: Path, progress=None) -> ImportReport:
    data = find_dir(root, "changerca") / "data"
    report = ImportReport("changerca")
    cases = sorted((c for c in data.glob("*/*") if (c / "gied" / f"{c.name}.json").is_file()),
                   key=lambda c: (c.parent.name, int(c.name.rsplit("_", 1)[1]) if c.name.rsplit("_", 1)[1].isdigit()
                                  else 0))
    con = duckdb.connect(":memory:")
    con.execute("SET TimeZone = 'UTC'")
    for i, case in enumerate(cases):
        job_id = opaque_id("cr", "changerca", case.name)
        with report.case(dest, case.name, job_id):
            _import_case(con, case, dest, report)
        if progress:
            progress(job_id, i + 1, len(cases))
    return report


def rollout_events(plan: dict) -> tuple[list[tuple], dict[str, dt.datetime]]:
    """The change log of every changed service alike: (time, entity, reason, message) rows, and when each
    deleted pod was deleted. Only rollout times and pods are read from the plan."""
    events, deleted = [], {}
    for svc in sorted(plan):
        start = _utc(plan[svc]["release_time"])
        replicas = plan[svc].get("target_replica")
        events.append((start, svc, "Deployment", f"rollout of {svc} to a new version (v2) started; "
                                                 f"pods are replaced one at a time, target {replicas} replicas"))
        steps = sorted(plan[svc].get("process", {}).values(), key=lambda s: s["release_complete_timestamp"])
        for n, step in enumerate(steps, 1):
            at = _utc(step["release_complete_timestamp"])
            for pod in step.get("release_pod") or []:
                events.append((at, pod, "Created", f"pod created by the rollout of {svc} (step {n} of {len(steps)})"))
            for pod in step.get("delete_pod") or []:
                events.append((at, pod, "Deleted", f"pod deleted by the rollout of {svc} (step {n} of {len(steps)})"))
                deleted[pod] = at
    return sorted(events), deleted


def _import_case(con, case: Path, dest: Path, report: ImportReport) -> None:
    label = json.loads((case / "gied" / f"{case.name}.json").read_text())
    plan = label["plan"]
    case_id = case.name
    job_id = opaque_id("cr", "changerca", case_id)
    detect = _utc(label["detect_timestamp"])
    experiment = _time(label["experiment_time"])
    start, end = detect - WINDOW, detect + WINDOW
    events, deleted = rollout_events(plan)

    files = [(f, FILE.match(f.name)) for f in sorted(case.glob("*.csv"))]
    files = [(f, m) for f, m in files if m]
    con.execute("CREATE OR REPLACE TEMP TABLE m (timestamp TIMESTAMP, entity VARCHAR, metric VARCHAR, value DOUBLE)")
    con.execute("CREATE OR REPLACE TEMP TABLE cut (pod VARCHAR, deleted_at TIMESTAMP)")
    con.executemany("INSERT INTO cut VALUES (?, ?)", list(deleted.items()))
    if files:
        # all pod files at once; which pod and call edge a row belongs to comes from its file's name
        # read once into a table: each metric below scans it again, and a view would parse every file again
        con.execute(f"CREATE OR REPLACE TEMP TABLE pod_rows AS SELECT * FROM "
                    f"{csv_view(con, 'pod_files', [f for f, _ in files], filename=True)}")
        view = "pod_rows"
        con.execute("CREATE OR REPLACE TEMP TABLE file_of (filename VARCHAR, pod VARCHAR, edge VARCHAR)")
        con.executemany("INSERT INTO file_of VALUES (?, ?, ?)",
                        [(str(f), m.group("pod"), f"{m.group('caller')}->{m.group('callee')}") for f, m in files])
        cols = set(con.table(view).columns)
        pairs = [(col, name, False) for col, name in POD_COLUMNS.items() if col in cols]
        pairs += [(col, name, True) for col, name in EDGE_COLUMNS.items() if col in cols]
        for col, name, per_edge in pairs:    # the column names are this module's constants
            # a deleted pod's file may go on with its replacement's values: rows after the deletion are dropped
            con.execute(f"""
                INSERT INTO m
                SELECT to_timestamp(60 * floor(TRY_CAST(r."Timestamp" AS BIGINT) / 60))::TIMESTAMP, f.pod,
                       {"$name || ' ' || f.edge" if per_edge else "$name"}, TRY_CAST(r."{col}" AS DOUBLE)
                FROM {view} r JOIN file_of f USING (filename) LEFT JOIN cut ON cut.pod = f.pod
                WHERE isfinite(TRY_CAST(r."{col}" AS DOUBLE)) AND TRY_CAST(r."Timestamp" AS BIGINT) IS NOT NULL
                  AND (cut.deleted_at IS NULL
                       OR to_timestamp(TRY_CAST(r."Timestamp" AS BIGINT))::TIMESTAMP <= cut.deleted_at)""",
                        {"name": name})
    for side, fmt in (("source_success.csv", "success_rate(%) to {callee}"),
                      ("destination_success.csv", "success_rate(%) from {caller}")):
        f = case / side
        if not f.is_file():
            continue
        con.execute(f"CREATE OR REPLACE TEMP TABLE edge_rows AS SELECT * FROM {csv_view(con, 'edge_file', [f])}")
        view = "edge_rows"     # read once: each column below scans it
        for col in con.table(view).columns:
            if col in ("time", "timestamp") or "_" not in col:
                continue
            caller, callee = col.split("_", 1)
            entity = caller if side.startswith("source") else callee
            con.execute(f"""
                INSERT INTO m SELECT to_timestamp(60 * floor(TRY_CAST("timestamp" AS BIGINT) / 60))::TIMESTAMP,
                                     $entity, $name, TRY_CAST("{col.replace('"', '""')}" AS DOUBLE)
                FROM {view} WHERE isfinite(TRY_CAST("{col.replace('"', '""')}" AS DOUBLE))""",
                        {"entity": entity, "name": fmt.format(caller=caller, callee=callee)})

    pods = sorted({m.group("pod") for _, m in files} | {e[1] for e in events if e[2] in ("Created", "Deleted")})
    calls, runs_on = set(), set()
    dep = case / "dependency.csv"
    if dep.is_file():
        for src, dst in con.execute(f"SELECT Source, Target FROM {csv_view(con, 'dependency', [dep])} "
                                    "WHERE Source IS NOT NULL AND Target IS NOT NULL").fetchall():
            (runs_on if IP.match(dst) else calls).add((src, dst))
    calls |= {(m.group("caller"), m.group("callee")) for _, m in files}
    services = sorted({service_of(p) for p in pods} | {a for a, _ in calls} | {b for _, b in calls}
                      | {s for s, _ in runs_on} | set(plan))
    nodes = sorted({n for _, n in runs_on})
    entities = [(s, "service", s, None) for s in services] + [(p, "pod", service_of(p), None) for p in pods] + \
               [(n, "node", None, n) for n in nodes]
    relations = [(a, b, "calls") for a, b in sorted(calls)] + [(p, service_of(p), "instance_of") for p in pods] + \
                [(s, n, "runs_on") for s, n in sorted(runs_on)]
    con.execute("CREATE OR REPLACE TEMP TABLE ents (id VARCHAR, kind VARCHAR, service VARCHAR, node VARCHAR)")
    con.executemany("INSERT INTO ents VALUES (?, ?, ?, ?)", entities)
    con.execute("CREATE OR REPLACE TEMP TABLE rels (src VARCHAR, dst VARCHAR, kind VARCHAR)")
    con.executemany("INSERT INTO rels VALUES (?, ?, ?)", relations)
    con.execute("CREATE OR REPLACE TEMP TABLE ev (timestamp TIMESTAMP, entity VARCHAR, reason VARCHAR, "
                "message VARCHAR)")
    con.executemany("INSERT INTO ev VALUES (?, ?, ?, ?)", events)

    baseline = [{"start": iso(experiment), "end": iso(start)}] if experiment < start else []
    meta = {"system": "OnlineBoutique", "source": "changerca", "alert": _alert(con, detect, experiment, start, end),
            "window": {"start": iso(start), "end": iso(end)}, "baseline": baseline}
    rows = write_job(con, dest, job_id, meta, {
        "entities": "SELECT * FROM ents", "relations": "SELECT * FROM rels",
        "metrics": "SELECT timestamp, entity, metric, avg(value) AS value FROM m GROUP BY ALL",
        "events": "SELECT * FROM ev"})
    svc, fault = label["fault_release_service"], label["fault"]
    write_label(dest, job_id, {
        "case_id": case_id, "source": "changerca", "system": "OnlineBoutique",
        "root_causes": [{"entity": svc, "level": "service", "service": svc}],
        "fault_type": fault, "inject_time": iso(_utc(plan[svc]["release_time"])),
        "changed_services": sorted(plan),
        "root_cause": REFERENCE.get(fault, "The new version of {svc} is defective.").format(svc=svc),
        "solution": SOLUTION.format(svc=svc),
    })
    report.add(job_id, "OnlineBoutique", rows)


def _alert(con, detect: dt.datetime, experiment: dt.datetime, start: dt.datetime, end: dt.datetime) -> str:
    """What the front end's monitoring shows: the success rate of its calls, window against baseline."""
    row = con.execute("""
        SELECT median(value) FILTER (WHERE timestamp >= $b0 AND timestamp < $b1),
               min(value) FILTER (WHERE timestamp >= $w0 AND timestamp < $w1)
        FROM (SELECT timestamp, avg(value) AS value FROM m
              WHERE entity = 'frontend' AND metric LIKE 'success_rate(%) to %' GROUP BY timestamp)""",
                      {"b0": experiment, "b1": start, "w0": start, "w1": end}).fetchall()[0]
    detail = (f"the success rate of the front end's calls fell to {row[1]:.1f}% (baseline median {row[0]:.1f}%)"
              if row[0] is not None and row[1] is not None else "requests of the front end degraded")
    return f"OnlineBoutique alert at {detect:%Y-%m-%d %H:%M} UTC: {detail}."
