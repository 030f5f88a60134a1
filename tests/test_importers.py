"""Importers on the real archives: every case becomes a job, and no job leaks its label."""
from __future__ import annotations

import datetime as dt
from collections import Counter

import pyarrow.parquet as pq
import yaml

from rcagent.job import Job


def test_every_indexed_case_becomes_a_job(imported, labels, index):
    assert sorted(lab["case_id"] for lab in labels.values()) == sorted(r["case_id"] for r in index)
    counts = Counter(lab["system"] for lab in labels.values())
    assert counts == {"TrainTicket": 28, "OnlineBoutique": 24 + 11, "SockShop": 30, "PetSite": 52}
    assert len(list((imported["dest"] / "jobs").iterdir())) == 145


def test_reports_name_missing_tables(imported):
    reports = imported["reports"]
    assert all(tables == ["events"] for tables in reports["TrainTicket"].lacking.values())
    ob = reports["OnlineBoutique"].lacking
    assert sum("traces" in t for t in ob.values()) == 4        # four cases have no trace file at all
    assert sum("logs" not in t for t in ob.values()) == 1       # one case kept some log files
    assert all("traces" in t for t in reports["SockShop"].lacking.values())


def test_labels_carry_level_fault_and_reference_text(labels, index):
    by_case = {r["case_id"]: r for r in index}
    for job, lab in labels.items():
        row = by_case[lab["case_id"]]
        rc = lab["root_causes"][0]
        assert rc["level"] in ("service", "pod", "node")
        assert lab["root_cause"].endswith(".") and lab["solution"].endswith(".")
        if lab["source"] == "nezha":
            assert rc["entity"] == row["root_cause_pod"] and rc["service"] == row["root_cause_service"]
            assert lab["fault_type"] == row["fault_type"]
        else:
            assert rc["entity"] == row["root_cause_service"]


def test_no_job_leaks_its_label(imported, labels):
    for job_id, lab in labels.items():
        folder = imported["dest"] / "jobs" / job_id
        rc = lab["root_causes"][0]
        meta_text = (folder / "job.yaml").read_text()
        meta = yaml.safe_load(meta_text)
        assert set(meta) <= {"id", "system", "source", "alert", "window", "baseline", "tables"}
        # the answer is neither in the id, nor in the alert, nor in any file name
        assert rc["service"] not in job_id and rc["entity"] not in job_id
        assert rc["entity"] not in meta["alert"]
        if lab["source"] != "petshop":  # PetSite's alert names the alarmed front end, which can be the culprit
            assert rc["service"] not in meta["alert"]
        assert all(rc["entity"] not in p.name for p in folder.iterdir())
        if lab["source"] == "nezha":  # elsewhere fault types are plain words (cpu, latency) an alert may use
            assert lab["fault_type"] not in meta_text
        if "inject_time" in lab:
            inject = dt.datetime.fromisoformat(lab["inject_time"].replace("Z", ""))
            start = dt.datetime.fromisoformat(meta["window"]["start"].replace("Z", ""))
            end = dt.datetime.fromisoformat(meta["window"]["end"].replace("Z", ""))
            assert start < inject < end and start != inject


def test_label_entities_are_in_the_inventory(imported, labels):
    for job_id, lab in labels.items():
        ents = pq.read_table(imported["dest"] / "jobs" / job_id / "entities.parquet").column("id").to_pylist()
        for rc in lab["root_causes"]:
            assert rc["entity"] in ents


def test_nezha_time_is_utc_and_bad_timestamp_ignored(job_of):
    # 2022-08-22 adservice rows carry TimeStamp 1861140279 (year 2028): metrics must stay on the case's day
    job = Job.load(job_of("2022-08-22_03_53"))
    lo, hi = job.query("SELECT min(timestamp), max(timestamp) FROM metrics")[0]
    assert lo.date() == hi.date() == dt.date(2022, 8, 22)
    assert job.query("SELECT count(*) FROM metrics WHERE entity LIKE 'adservice%'")[0][0] > 0
    tt = Job.load(job_of("2023-01-29_08_43"))
    span_lo = tt.query("SELECT min(start) FROM traces WHERE start >= TIMESTAMP '2023-01-29 08:42:00'")[0][0]
    assert span_lo.hour == 8  # inject_timestamp (8 h early) is never used


def test_nezha_spans_and_lines_repeated_by_overlapping_minute_files_are_kept_once(job_of):
    # 2023-01-29_08_52: a minute's trace and log files repeat spans and lines of the minutes before
    job = Job.load(job_of("2023-01-29_08_52"))
    spans, distinct = job.query("SELECT count(*), count(DISTINCT (trace_id, span_id)) FROM traces")[0]
    assert spans == distinct > 10_000
    lines = job.query("SELECT count(*) FROM logs")[0][0]
    assert lines == job.query("SELECT count(*) FROM (SELECT DISTINCT * FROM logs)")[0][0] > 10_000


def test_nezha_log_levels_are_read_from_json_lines_and_text_alike(job_of):
    """Online Boutique's Go and Node services write JSON lines with a `severity` field, TrainTicket's Java
    services a level word after the time: both give the level column (the JSON lines were UNKNOWN)."""
    ob = Job.load(job_of("2022-08-22_05_18"))
    rows = ob.query("""SELECT level, upper(json_extract_string(message, '$.severity')) AS said, count(*)
                       FROM logs WHERE json_valid(message) GROUP BY ALL""")
    assert sum(n for *_, n in rows) > 100 and all(level == said for level, said, _ in rows)
    tt = Job.load(job_of("2023-01-29_08_43"))
    assert {lv for (lv,) in tt.query("SELECT DISTINCT level FROM logs")} == {"INFO", "WARN", "ERROR"}


def test_baseline_has_several_periods(contacts_job):
    tables = [set(p.tables) for p in contacts_job.baseline]
    assert {"metrics"} in tables and {"metrics", "traces", "logs"} in tables
    assert contacts_job.baseline_seconds("traces") > 0


def test_changerca_jobs_carry_every_rollout_alike_and_nothing_of_the_label(imported, labels):
    from rcagent.eval.baselines import run_baseline

    cases = {job: lab for job, lab in labels.items() if lab["source"] == "changerca"}
    assert len(cases) == 11
    for job_id, lab in cases.items():
        job = Job.load(imported["dest"] / "jobs" / job_id)
        deployments = job.query("SELECT entity, message FROM events WHERE reason = 'Deployment' ORDER BY 1")
        assert [e for e, _ in deployments] == lab["changed_services"]          # every change, defective or not
        texts = " ".join(m for (m,) in job.query("SELECT message FROM events"))
        assert lab["fault_type"] not in texts and "fault" not in texts and "defect" not in texts
        # a deleted pod has no rows after its deletion (its file goes on with the replacement's values)
        late = job.query("""SELECT count(*) FROM metrics m JOIN events e ON m.entity = e.entity
                            WHERE e.reason = 'Deleted' AND m.timestamp > e.timestamp""")[0][0]
        assert late == 0
        # pods named with their version; the ones the rollout created are in the inventory
        created = [e for (e,) in job.query("SELECT entity FROM events WHERE reason = 'Created'")]
        assert created and all("-v2-" in p and job.entities[p].kind == "pod" for p in created)
        assert {"latency", "cpu_usage_rate(%)"} <= {m for (m,) in job.query("SELECT DISTINCT metric FROM metrics")}
        ranked = [rc.entity for rc in run_baseline(job, "recent-change").root_causes]
        assert set(ranked) == set(lab["changed_services"])
        job.con.close()


def test_petsite_client_nodes_are_the_users_entry(imported, labels):
    # X-Ray's client nodes measure the application from its callers' side: the entry, not a service
    job_id = next(j for j, lab in labels.items() if lab["source"] == "petshop")
    table = pq.read_table(imported["dest"] / "jobs" / job_id / "entities.parquet").to_pylist()
    kinds = {row["id"]: row["kind"] for row in table}
    clients = [e for e in kinds if e.endswith("_client")]
    assert clients and all(kinds[e] == "entry" for e in clients)
    assert kinds["PetSite"] == "service"


def test_an_archive_is_extracted_for_one_import_and_removed_after_it(tmp_path, monkeypatch):
    """An archive is extracted under the cache for the length of one import: nothing of it stays there, so
    a new version of the archive never leaves the old one's copy behind."""
    from rcagent.importers import run_import
    from tests.conftest import DATA

    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    report = run_import("rcd", DATA / "rcd-sockshop.tar.xz", tmp_path / "out")
    assert len(report.jobs) == 30
    data = tmp_path / "home" / ".cache" / "rcagent" / "data"
    assert data.is_dir() and not list(data.iterdir())


def test_an_rcd_case_of_another_fault_or_without_its_normal_period_imports(tmp_path):
    """Real SockShop runs placed as cases the shared archive lacks: a fault it does not have (`delay`), a
    service and fault that both hold a dash, and a run without normal.csv right after one with it. Each
    becomes a job labelled with its service and fault; the run without a normal period has no baseline and
    only its own rows (not the run before's normal period). A run whose anomalous.csv holds no sample is
    skipped, named with its reason, and the others are imported; when no run can be, `import` says so in
    one line and exits 2."""
    import tarfile

    from rcagent.importers import run_import
    from rcagent.importers.rcd import _service_and_fault
    from tests.conftest import DATA
    from tests.test_cli import rcagent
    assert _service_and_fault("front-end-disk-io", ["carts", "front-end"]) == ("front-end", "disk-io")
    assert _service_and_fault("carts-cpu", []) == ("carts", "cpu") and _service_and_fault("x", []) == ("x", "unknown")
    data = tmp_path / "src" / "sock-shop-data"
    with tarfile.open(DATA / "rcd-sockshop.tar.xz") as tar:
        for member, to in (("carts-cpu/1", "carts-delay/1"), ("orders-cpu/1", "orders-disk-io/1"),
                           ("orders-mem/1", "orders-mem/1")):
            for part in ("normal", "anomalous"):
                if to == "orders-mem/1" and part == "normal":
                    continue
                src = tar.extractfile(f"rcd-sockshop/sock-shop-data/{member}/{part}.csv")
                (data / to).mkdir(parents=True, exist_ok=True)
                (data / to / f"{part}.csv").write_bytes(src.read())
    (data / "user-cpu" / "1").mkdir(parents=True)
    (data / "user-cpu" / "1" / "anomalous.csv").write_text("time,user_cpu\n")
    (data / "user-cpu" / "2").mkdir(parents=True)
    (data / "user-cpu" / "2" / "anomalous.csv").write_text("tiem,user_cpu\n1,2\n")
    r = rcagent("import", "rcd", tmp_path / "src", tmp_path / "out")
    assert r.returncode == 0, r.stderr
    assert "Imported 3 jobs" in r.stdout and "skipped 2 cases" in r.stdout
    assert "user-cpu/1: " in r.stdout and "anomalous.csv holds no sample" in r.stdout
    assert "user-cpu/2: " in r.stdout and "has no column 'time' (its header begins tiem, user_cpu)" in r.stdout
    assert len(list((tmp_path / "out" / "jobs").iterdir())) == len(list((tmp_path / "out" / "labels").iterdir())) == 3
    report = run_import("rcd", tmp_path / "src", tmp_path / "again")
    assert len(report.jobs) == 3 and list(report.skipped) == ["user-cpu/1", "user-cpu/2"]
    broken = tmp_path / "broken" / "sock-shop-data" / "user-cpu" / "1"
    broken.mkdir(parents=True)
    (broken / "anomalous.csv").write_text("time,user_cpu\n")
    r = rcagent("import", "rcd", tmp_path / "broken", tmp_path / "none")
    errors = [line for line in r.stderr.splitlines() if line.startswith("error: ")]
    assert r.returncode == 2 and len(errors) == 1 and "none of its 1 cases" in errors[0]
    assert "Traceback" not in r.stderr and not (tmp_path / "none" / "jobs").exists()
    labels = {}
    for f in (tmp_path / "out" / "labels").glob("*.yaml"):
        label = yaml.safe_load(f.read_text())
        labels[label["case_id"]] = label
    assert {c: (lab["root_causes"][0]["entity"], lab["fault_type"]) for c, lab in labels.items()} == {
        "carts-delay/1": ("carts", "delay"), "orders-disk-io/1": ("orders", "disk-io"), "orders-mem/1": ("orders", "mem")}
    assert "delay" in labels["carts-delay/1"]["root_cause"] and "carts" in labels["carts-delay/1"]["solution"]
    for case, baseline in (("orders-mem/1", False), ("orders-disk-io/1", True)):
        folder = tmp_path / "out" / "jobs" / labels[case]["job"]
        meta = yaml.safe_load((folder / "job.yaml").read_text())
        first = Job.load(folder).query("SELECT min(timestamp) FROM metrics")[0][0]
        assert bool(meta["baseline"]) is baseline
        assert (first < dt.datetime.fromisoformat(meta["window"]["start"].rstrip("Z"))) is baseline
