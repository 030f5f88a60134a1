"""Job loading: validation with one clear message per problem; missing or empty tables still load."""
from __future__ import annotations

import json
import shutil

import pytest

from rcagent.errors import BadInput
from rcagent.job import Job
from rcagent.onset import without_baseline
from rcagent.tools.overview import ranking
from tests.evidence_jobs import with_tables

META = """id: tiny
system: test
alert: checkout latency high
window: {start: '2024-01-01T00:10:00Z', end: '2024-01-01T00:20:00Z'}
baseline: [{start: '2024-01-01T00:00:00Z', end: '2024-01-01T00:10:00Z'}]
"""


def write(folder, meta=META, **tables):
    folder.mkdir(exist_ok=True)
    (folder / "job.yaml").write_text(meta)
    for name, text in tables.items():
        (folder / f"{name}.csv").write_text(text)
    return folder


def test_real_job_loads_as_views(contacts_job):
    job = contacts_job
    assert job.system == "TrainTicket" and job.rows["traces"] > 1000 and job.rows["events"] == 0
    kinds = {e.kind for e in job.entities.values()}
    assert {"service", "pod", "node"} <= kinds
    # registered as views over the files, not copied into DuckDB tables
    views = {r[0] for r in job.query("SELECT view_name FROM duckdb_views() WHERE NOT internal")}
    assert {"metrics", "traces", "logs", "events"} <= views
    assert job.query("SELECT count(*) FROM duckdb_tables()")[0][0] == 0


def test_missing_and_empty_tables_load(tmp_path):
    job = Job.load(write(tmp_path / "j", metrics="timestamp,entity,metric,value\n",
                         entities="id,kind\ncheckout,service\n"))
    assert job.rows["metrics"] == 0 and job.rows["logs"] == 0
    assert job.query("SELECT count(*) FROM logs")[0][0] == 0
    assert list(job.entities) == ["checkout"]


@pytest.mark.parametrize("setup, message", [
    (lambda d: None, "job folder not found"),
    (lambda d: d.mkdir(), "job.yaml: missing"),
    (lambda d: write(d, meta="id: [unclosed"), "not valid YAML"),
    (lambda d: write(d, meta="id: x\nalert: y\n"), "window: missing"),
    (lambda d: write(d, meta=META.replace("00:20:00Z", "00:05:00Z")), "ends before it starts"),
    (lambda d: write(d, metrics="timestamp,entity,value\n2024-01-01T00:00:00,a,1\n"), "missing column(s) metric"),
    (lambda d: write(d, metrics="timestamp,entity,metric,value\nyesterday,a,cpu,1\n"), "unparseable 'timestamp'"),
    (lambda d: write(d, metrics="timestamp,entity,metric,value\n2024-01-01T00:00:00,a,cpu,lots\n"),
     "unparseable 'value'"),
])
def test_bad_input_gets_one_clear_message(tmp_path, setup, message):
    folder = tmp_path / "job"
    setup(folder)
    with pytest.raises(BadInput) as err:
        Job.load(folder)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_resolve_is_fuzzy_and_suggests(contacts_job):
    assert contacts_job.resolve("ts-contacts-service").kind == "service"
    assert contacts_job.resolve("TS-CONTACTS-SERVICE").id == "ts-contacts-service"
    with pytest.raises(BadInput) as err:
        contacts_job.resolve("contacts-servce")
    assert "did you mean" in str(err.value) and "ts-contacts-service" in str(err.value)


def test_csv_job_matches_parquet(tmp_path, job_of):
    """The same job written as CSV loads with the same counts (CSV is a supported table format)."""
    import duckdb
    src = job_of("2023-01-29_08_43")
    dst = tmp_path / "csvjob"
    dst.mkdir()
    shutil.copy(src / "job.yaml", dst / "job.yaml")
    for p in src.glob("*.parquet"):
        duckdb.execute(f"COPY (SELECT * FROM read_parquet('{p}')) TO '{dst / (p.stem + '.csv')}' (HEADER)")
    a, b = Job.load(src), Job.load(dst)
    assert a.rows == b.rows and set(a.entities) == set(b.entities)


def test_a_table_in_another_time_zone_is_named_unused_not_silently_ignored(tmp_path, job_of, monkeypatch):
    """A real job whose logs were written 8 hours late (local time where UTC was meant): the job, its
    summary (which the model reads) and `rcagent analyze` name the logs unused; the job as imported has none."""
    from tests.test_cli import contacts_script, rcagent

    src = job_of("2023-01-29_08_43")
    assert Job.load(src).unused_tables() == []
    dst = with_tables(src, tmp_path / "late-logs",
                      logs="SELECT timestamp + INTERVAL 8 HOUR AS timestamp, * EXCLUDE (timestamp) FROM original")
    job = Job.load(dst)
    [(table, rows, baseline, first, last)] = job.unused_tables()
    assert (table, rows, baseline) == ("logs", job.rows["logs"], 0) and first > job.window.end
    assert f"Note: logs: {rows} rows, none in the window or its baseline" in job.summary()
    script = contacts_script(tmp_path / "script.json")
    r = rcagent("analyze", "--job", dst, "--backend", "scripted", "--script", script, "--store", tmp_path / "s.db",
                "--out", tmp_path / "d.json", "--format", "md")
    assert r.returncode == 0, r.stderr
    warnings = [line for line in r.stderr.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1 and "logs:" in warnings[0] and "another time zone" in warnings[0]
    # the saved diagnosis and the Markdown report carry it too
    assert json.loads((tmp_path / "d.json").read_text())["warnings"] == [warnings[0].removeprefix("warning: ")]
    assert f"- {warnings[0].removeprefix('warning: ')}" in r.stdout



def test_rows_without_a_time_are_named_not_silently_dropped(tmp_path, job_of):
    """A real job whose logs lost every timestamp and whose metrics lost those of one pod (a collector that
    left the column out, blank CSV cells): the job says how many rows of each table it cannot use, in its
    warnings and in the summary the model reads; the job as imported has none."""
    import duckdb

    src = job_of("2023-01-29_08_43")
    assert Job.load(src).untimed() == []
    dst = tmp_path / "untimed"
    shutil.copytree(src, dst)
    pod = "ts-contacts-service-866bd68c97-xcqfx"
    for table, blank in (("logs", "true"), ("metrics", f"entity = '{pod}'")):
        (dst / f"{table}.parquet").unlink()
        duckdb.execute(f"COPY (SELECT CASE WHEN {blank} THEN NULL ELSE timestamp END AS timestamp, "
                       f"* EXCLUDE (timestamp) FROM read_parquet('{src / f'{table}.parquet'}')) "
                       f"TO '{dst / f'{table}.parquet'}'")
    job = Job.load(dst)
    pod_rows = job.query("SELECT count(*) FROM metrics WHERE entity = $1", [pod])[0][0]
    assert 0 < pod_rows < job.rows["metrics"]
    assert job.untimed() == [("metrics", pod_rows), ("logs", job.rows["logs"])]
    notes = [n for n in job.warnings() if "have no timestamp" in n]
    assert notes == [f"metrics: {pod_rows} of its {job.rows['metrics']} rows have no timestamp and are not used",
                     f"logs: {job.rows['logs']} of its {job.rows['logs']} rows have no timestamp and are not used"]
    assert all(f"Note: {n}" in job.summary() for n in notes)


def test_rows_with_no_entity_metric_or_message_are_named_and_left_out(tmp_path, job_of):
    """A real job whose metrics lost the series name of one pod's rows and whose logs lost the pod of one
    pod's lines (blank CSV cells): the job says how many rows of each it cannot use and leaves them out, so
    the ranking and the onset search (run here without a baseline) never meet a series or entity named null."""
    src = job_of("2023-01-29_08_43")
    pod = "ts-contacts-service-866bd68c97-xcqfx"
    blank = "SELECT * REPLACE (CASE WHEN entity = '" + pod + "' THEN NULL ELSE {0} END AS {0}) FROM original"
    dst = with_tables(src, tmp_path / "unnamed", metrics=blank.format("metric"), logs=blank.format("entity"))
    original = Job.load(src)
    lost = {t: original.query(f"SELECT count(*) FROM {t} WHERE entity = $1", [pod])[0][0] for t in ("metrics", "logs")}
    assert all(lost.values())
    job = Job.load(dst)
    assert [n for n in job.warnings() if "rows have no entity" in n] == [
        f"metrics: {lost['metrics']} of its {job.rows['metrics']} rows have no entity or metric and are not used",
        f"logs: {lost['logs']} of its {job.rows['logs']} rows have no entity or message and are not used"]
    assert job.query("SELECT count(*) FROM metrics WHERE metric IS NULL")[0][0] == 0
    without_baseline(job)
    assert all(entity for entity, _, _ in ranking(job))


ZONED_CHECK = """
import json, sys
from rcagent.tools.overview import ranking
from rcagent.job import Job
out = {}
for name in sys.argv[1:]:
    job = Job.load(name)
    out[name] = {"window": {t: job.query(f"SELECT count(*) FROM {t} WHERE {job.in_window(job.time_column(t))}")[0][0]
                            for t in ("metrics", "logs")},
                 "unused": job.unused_notes(), "top": [(n, round(s, 6)) for n, s, _ in ranking(job)[:5]]}
print(json.dumps(out))
"""


def test_zoned_times_in_files_are_read_as_utc_whatever_the_machine_s_zone(tmp_path, job_of):
    """A real job whose metrics CSV gives local times with their offset ("16:43:00+08:00") and whose logs
    Parquet holds timestamptz, loaded on a machine set to Asia/Shanghai: the same rows fall in the window and
    the same top five rank as from the job as imported (a direct cast dropped the offset; DuckDB read
    timestamptz in the machine's zone)."""
    import json
    import os
    import subprocess
    import sys

    import duckdb

    src = job_of("2023-01-29_08_43")
    dst = tmp_path / "zoned"
    shutil.copytree(src, dst)
    (dst / "metrics.parquet").unlink()
    (dst / "logs.parquet").unlink()
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    con.execute(f"COPY (SELECT strftime(timestamp + INTERVAL 8 HOUR, '%Y-%m-%dT%H:%M:%S.%f') || '+08:00' AS timestamp, "
                f"* EXCLUDE (timestamp) FROM read_parquet('{src / 'metrics.parquet'}')) TO '{dst / 'metrics.csv'}' (HEADER)")
    con.execute(f"COPY (SELECT CAST(CAST(timestamp AS VARCHAR) || '+00:00' AS TIMESTAMPTZ) AS timestamp, "
                f"* EXCLUDE (timestamp) FROM read_parquet('{src / 'logs.parquet'}')) TO '{dst / 'logs.parquet'}'")
    assert "TIMESTAMP WITH TIME ZONE" in str(con.execute(f"DESCRIBE SELECT * FROM '{dst / 'logs.parquet'}'").fetchall())
    r = subprocess.run([sys.executable, "-c", ZONED_CHECK, str(src), str(dst)], capture_output=True, text=True,
                       env={**os.environ, "TZ": "Asia/Shanghai"})
    assert r.returncode == 0, r.stderr
    imported, zoned = json.loads(r.stdout).values()
    assert imported["window"]["metrics"] > 0 and imported["window"]["logs"] > 0
    assert zoned == imported


def test_a_baseline_that_runs_through_the_window_is_cut_around_it(tmp_path, job_of):
    """"The last ten minutes" as the baseline of a real job (08:41:09 to 08:52, its window 08:42 to 08:46
    inside): only the parts before and after the window are compared with it, the user and the model are
    told, and the contacts fault still ranks first (read as given, the fault's own samples made it normal)."""
    import yaml

    from rcagent.tools.overview import ranking

    dst = tmp_path / "overlap"
    shutil.copytree(job_of("2023-01-29_08_43"), dst)
    meta = yaml.safe_load((dst / "job.yaml").read_text())
    meta["baseline"] = [{"start": "2023-01-29T08:41:09Z", "end": "2023-01-29T08:52:00Z"}]
    (dst / "job.yaml").write_text(yaml.safe_dump(meta))
    job = Job.load(dst)
    assert [(str(p.start), str(p.end)) for p in job.baseline] == [
        ("2023-01-29 08:41:09", "2023-01-29 08:42:00"), ("2023-01-29 08:46:00", "2023-01-29 08:52:00")]
    assert len(job.warnings()) == 1 and "overlaps the window" in job.summary()
    assert ranking(job)[0][0].startswith("ts-contacts-service")


@pytest.mark.parametrize("start, end, parts", [
    ("00:00", "00:10", [("00:00", "00:10")]),                    # before the window: as given
    ("00:05", "00:15", [("00:05", "00:10")]),                    # into the window: its part before
    ("00:12", "00:18", []),                                      # inside the window: nothing
    ("00:15", "00:30", [("00:20", "00:30")]),                    # out of the window: its part after
    ("00:00", "00:30", [("00:00", "00:10"), ("00:20", "00:30")]),  # through the window: both parts
])
def test_baseline_periods_are_cut_to_their_parts_outside_the_window(tmp_path, start, end, parts):
    meta = META.replace("baseline: [{start: '2024-01-01T00:00:00Z', end: '2024-01-01T00:10:00Z'}]",
                        f"baseline: [{{start: '2024-01-01T{start}:00Z', end: '2024-01-01T{end}:00Z', tables: [logs]}}]")
    job = Job.load(write(tmp_path / "job", meta=meta))
    assert [(f"{p.start:%H:%M}", f"{p.end:%H:%M}", p.tables) for p in job.baseline] == [
        (a, b, ("logs",)) for a, b in parts]
    assert len(job.warnings()) == (parts != [(start, end)])



def test_a_real_table_with_nothing_before_the_onset_it_is_split_at_is_named(job_of):
    """Online Boutique 2022-08-22 04:18: its traces come without a baseline and begin at 04:19:19, after the
    onset found in the window (04:18:28), so the window's part before the onset, their only baseline, holds
    none of them. The job says so instead of reading as compared with their own past."""
    job = Job.load(job_of("2022-08-22_04_18"))
    [(table, rows, first, last)] = job.baseless_tables()
    assert table == "traces" and "traces" in job.onset.tables and first > job.onset.end
    assert rows == job.rows["traces"] and job.unused_tables() == []
    note, weaker = job.warnings()
    assert note.startswith(f"traces: its {rows} rows in the window all lie after the onset found in it at")
    assert f"Note: {note}" in job.summary()
    assert weaker.startswith("traces: no baseline given; compared with the window's part before the onset")


def test_a_baseline_given_the_wrong_date_is_named(tmp_path, job_of):
    """A real job whose baseline periods were written a day early: every table has rows in the window and
    none in the baseline, and each is named (the job as imported names none)."""
    import yaml

    src = job_of("2023-01-29_08_43")
    assert Job.load(src).baseless_tables() == []
    dst = tmp_path / "day-early"
    shutil.copytree(src, dst)
    meta = yaml.safe_load((dst / "job.yaml").read_text())
    for period in meta["baseline"]:
        period["start"], period["end"] = (str(period[k]).replace("2023-01-29", "2023-01-28") for k in ("start", "end"))
    (dst / "job.yaml").write_text(yaml.safe_dump(meta))
    job = Job.load(dst)
    assert [t for t, *_ in job.baseless_tables()] == ["metrics", "traces", "logs"]
    notes = [n for n in job.warnings() if "is the baseline's date wrong?" in n]
    assert len(notes) == 3 and all(f"Note: {n}" in job.summary() for n in notes)
    # ... and read as a job given no baseline: split at the onset found in its window, the culprit named as
    # there (it was not: compared with an empty baseline, its log lines and calls had nothing to differ from)
    assert job.onset is not None and job.onset.tables == ("metrics", "traces", "logs")
    assert job.warnings()[-1].startswith("metrics, traces, logs: none of their rows in the baseline given; compared "
                                         "with the window's part before the onset found in it at")
    bare = Job.load(src)
    without_baseline(bare)
    assert ranking(job)[:2] == ranking(bare)[:2] and ranking(job)[0][0] == "ts-contacts-service"


def test_a_real_job_whose_baseline_holds_none_of_its_rows_still_names_what_moved(tmp_path, job_of):
    """SockShop user-cpu/2 with its baseline period given a day early: read as a job given no baseline (split
    at the onset found in its window, its services also compared with each other), the CPU hog is named as
    it is there; it used to be "nothing moved", the window compared with an empty baseline."""
    import yaml

    src = job_of("user-cpu/2")
    dst = tmp_path / "day-early"
    shutil.copytree(src, dst)
    meta = yaml.safe_load((dst / "job.yaml").read_text())
    meta["baseline"][0]["start"], meta["baseline"][0]["end"] = "2022-05-16T22:15:00Z", "2022-05-16T22:19:38Z"
    (dst / "job.yaml").write_text(yaml.safe_dump(meta))
    job = Job.load(dst)
    bare = Job.load(src)
    without_baseline(bare)
    assert job.onset == bare.onset and job.onset.tables == ("metrics",)
    assert ranking(job)[:3] == ranking(bare)[:3] and ranking(job)[0][0] == "user"
    *_, misdated, weaker = job.warnings()
    assert "none of its rows lie in its baseline (2022-05-16 22:15:00 to 2022-05-16 22:19:38 UTC" in misdated
    assert weaker.startswith("metrics: none of its rows in the baseline given; compared with the window's part "
                             "before the onset found in it")


def test_a_real_table_with_nothing_in_the_window_is_named(job_of):
    """Online Boutique 2022-08-22 04:36: its traces stop a minute into the window, before the onset found in
    it (all 23,292 spans fall in the part before it, their baseline). The job says so instead of reading as
    a job with traces."""
    job = Job.load(job_of("2022-08-22_04_36"))
    [(table, rows, baseline, first, last)] = job.unused_tables()
    assert table == "traces" and rows == baseline > 0 and last < job.window.start
    [note] = job.warnings()      # not also "no baseline given": nothing of it is compared
    assert note.startswith(f"traces: none of its {rows} rows in the window") and "collection stop" in note
    assert "the window from the onset found in it is" in note       # the window is split at an onset
    assert f"Note: {note}" in job.summary()


def test_a_real_job_given_no_baseline_tells_the_operator_its_answer_is_weaker(tmp_path, job_of):
    """PetSite low_traffic/test/issue_16 with its baseline removed: the window is split at the onset found in
    it, and `rcagent batch` (as analyze) says so with the way to a firmer answer; not in the summary, whose
    Baseline line already tells the model. The job as imported has no such line."""
    import yaml
    from tests.test_cli import rcagent

    src = job_of("low_traffic/test/issue_16")
    assert Job.load(src).warnings() == []
    dst = tmp_path / "jobs" / "bare"
    shutil.copytree(src, dst)
    meta = yaml.safe_load((dst / "job.yaml").read_text())
    meta["baseline"] = []
    (dst / "job.yaml").write_text(yaml.safe_dump(meta))
    job = Job.load(dst)
    [note] = job.warnings()
    assert note.startswith(f"metrics: no baseline given; compared with the window's part before the onset found in "
                           f"it at {job.onset.end:%Y-%m-%d %H:%M:%S} UTC") and "fault-free period" in note
    assert note not in job.summary() and "which had none: the window before the onset" in job.summary()
    r = rcagent("batch", "--jobs", tmp_path / "jobs", "--out", tmp_path / "o.jsonl", "--method", "overview", "--quiet")
    assert r.returncode == 0, r.stderr
    assert json.loads((tmp_path / "o.jsonl").read_text())["warnings"] == [note]
    # analyze says it on stderr, and the run's stored diagnosis and its HTML page keep it
    import html

    from rcagent.htmlreport import run_page
    from rcagent.store import Store
    culprit = "payforadoption_AWS::ECS::Container"
    (tmp_path / "script.json").write_text(json.dumps([
        {"thought": "look", "action": "metrics", "arguments": {"entity": culprit}},
        {"thought": "done", "action": "finalize", "arguments": {
            "root_causes": [culprit], "root_cause": "Its availability fell.", "solution": "Roll it back.",
            "evidence": ["availability fell"], "responsibility": "its team"}}]))
    r = rcagent("analyze", "--job", dst, "--backend", "scripted", "--script", tmp_path / "script.json",
                "--store", tmp_path / "s.db", "--out", tmp_path / "d.json")
    assert r.returncode == 0, r.stderr
    assert f"warning: {note}" in r.stderr.splitlines()
    run_id = json.loads((tmp_path / "d.json").read_text())["run_id"]
    assert json.loads(Store(tmp_path / "s.db").get_run(run_id)["diagnosis"])["warnings"] == [note]
    assert "How the job was read" in (text := run_page(Store(tmp_path / "s.db"), run_id)) and html.escape(note) in text


BLANKS = {"DOUBLE": ["NULL", "0", "-1", "1e308", "-1e308", "1e-300"],
          "TIMESTAMP": ["NULL", "TIMESTAMP '1970-01-01'", "TIMESTAMP '2262-01-01'", "{c} + INTERVAL 1 YEAR"],
          "VARCHAR": ["NULL", "''", "' '", "repeat('a', 9000)", "'''; DROP TABLE metrics; --'", "chr(27) || '[2J'"]}


def test_tables_with_values_blank_null_or_extreme_anywhere_are_read_or_refused_in_one_line(job_of, tmp_path):
    """A real job's tables with a column's values replaced on some of their rows (hypothesis: a blank, a
    null, an extreme number or time, an escape code, in one to three columns): the job is read, ranked and
    ranked again as if it had no baseline, and every information tool answers on its first entities, or
    the job is refused in one line; never another exception."""
    import itertools

    import duckdb
    from hypothesis import HealthCheck, given, settings, strategies as st

    from rcagent.errors import AgentMessage
    from rcagent.job import SCHEMAS
    from rcagent.tools import load_builtin_tools, run_tool

    src = job_of("2023-01-29_08_43")
    columns = [(t, c, "DOUBLE" if ty == "DOUBLE" else ty) for t, cols in SCHEMAS.items() if (src / f"{t}.parquet").exists()
               for c, ty in cols.items()]
    tools = load_builtin_tools()
    outcomes: list[str] = []
    folders = itertools.count()

    @settings(max_examples=40, deadline=None, database=None, derandomize=True,
              suppress_health_check=list(HealthCheck))
    @given(st.lists(st.tuples(st.sampled_from(columns), st.integers(0, 5), st.sampled_from([1, 3, 50])),
                    min_size=1, max_size=3))
    def read_or_refused(changes):
        dst = tmp_path / f"case{next(folders)}"
        shutil.copytree(src, dst)
        for (table, column, kind), pick, every in changes:
            value = BLANKS[kind][pick % len(BLANKS[kind])].format(c=column)
            f = dst / f"{table}.parquet"
            if column not in duckdb.read_parquet(str(f)).columns:
                continue
            duckdb.execute(f"COPY (SELECT * EXCLUDE (file_row_number) REPLACE (CASE WHEN file_row_number % {every} = 0 "
                           f"THEN CAST({value} AS {kind}) ELSE {column} END AS {column}) "
                           f"FROM read_parquet('{f}', file_row_number = true)) TO '{f}.new' (FORMAT parquet)")
            (dst / f"{table}.parquet.new").replace(f)
        try:
            job = Job.load(dst)
        except BadInput as exc:
            assert "\n" not in str(exc)
            outcomes.append("refused")
            return
        first = [e for e, _, _ in ranking(job)[:2]]
        for tool in tools.values():
            if tool.available and not tool.available(job):
                continue
            for entity in first:
                args = {p.name: entity if p.entity else p.choices[0] for p in tool.params if p.entity or p.choices}
                try:
                    run_tool(tool, job, args)
                except AgentMessage:
                    pass
        job.warnings()
        without_baseline(job)
        ranking(job)
        outcomes.append("read")

    read_or_refused()
    assert outcomes.count("read") > 10, outcomes
