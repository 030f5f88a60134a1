"""The evidence ranking's signals: unit-aware floors, spikes, changes followed by a degradation, log lines
by template, own time against waiting on callees, improvements ignored, the onset of a job without a
baseline and pods against their replicas; on small made-up series and on real cases; and no dataset,
system or service name in its code."""
from __future__ import annotations

import datetime as dt
import re
from dataclasses import replace
from pathlib import Path

import duckdb
import numpy as np
import pytest
import yaml

from rcagent.job import Job
from rcagent.onset import step_scores, without_baseline
from rcagent.tools.common import deviation, second
from rcagent.tools.call_signals import own_time_rose, traffic_factor, waits
from rcagent.tools.overview import DEFAULT, overview, ranking, scores
from tests.hostile import make_job

ROOT = Path(__file__).resolve().parent.parent


def test_a_success_rate_drop_of_a_few_points_counts():
    assert deviation(100.0, 0.0, 85.0, 100.0, "success_rate(%)") <= -15
    assert abs(deviation(100.0, 0.0, 85.0, 100.0, "requests")) < 3       # a count: 15% is within its floor
    # a rate whose name carries no unit is read as a percentage (or a ratio, below 1) all the same
    assert deviation(100.0, 0.0, 95.0, 100.0, "availability_average") <= -5
    assert deviation(1.0, 0.0, 0.95, 1.0, "success_ratio") <= -5


def test_a_blip_on_a_millisecond_series_in_seconds_does_not_dominate():
    # 5 ms on average, one sample at 0.1 s: the second most extreme value is what scores
    window = [0.005, 0.006, 0.1]
    assert second(sorted(window, reverse=True)[:2]) == 0.006
    assert abs(deviation(0.005, 0.0005, 0.005, second([0.1, 0.006]), "latency_p90_s")) < 1
    # the floor alone keeps even the spike itself moderate in a series measured in seconds
    assert deviation(0.005, 0.0005, 0.005, 0.1, "latency_p90_s") < 10 < deviation(0.005, 0.0005, 0.005, 0.1, "x")


def test_a_count_of_events_is_floored_at_its_poisson_noise():
    # a rarely called endpoint: none in the baseline, three in the window, is no outage
    assert deviation(0.0, 0.0, 0.0, 3.0, "requests_sum") <= 3
    assert deviation(0.0, 0.0, 0.0, 3.0, "queue_depth") >= 999        # not a count: the old absolute floor
    # a busy one that doubled still counts, by far
    assert deviation(400.0, 5.0, 790.0, 800.0, "requests_sum") >= 10


def test_on_real_jobs_without_their_baseline_no_request_count_reaches_the_cap(imported, labels):
    # PetSite's request counts are sparse: without the baseline, a few requests after none in the short
    # stretch before the onset scored the cap (999 sd) before counts had a floor of their own
    total = capped = 0
    for job_id, lab in labels.items():
        if lab.get("source") != "petshop":
            continue
        job = Job.load(imported["dest"] / "jobs" / job_id)
        without_baseline(job)
        total += 1
        capped += sum("requests_sum up 999 sd" in why for sigs in scores(job).values() for _, why, _ in sigs)
        job.con.close()
    assert total >= 40 and capped == 0, (capped, total)


def _with_events(job: Path, rows: list[tuple]) -> Path:
    con = duckdb.connect()
    con.execute("CREATE TABLE events (timestamp TIMESTAMP, entity VARCHAR, reason VARCHAR, message VARCHAR)")
    con.executemany("INSERT INTO events VALUES (?, ?, ?, ?)", rows)
    con.table("events").write_parquet(str(job / "events.parquet"))
    con.close()
    return job


def test_a_change_followed_by_a_degradation_ranks_the_changed_entity_first(tmp_path):
    # frontend's latency rises as much as checkout's; checkout was deployed just before, and its calls fail
    job = _with_events(make_job(tmp_path / "j"), [
        ("2024-01-01 00:09:00", "checkout", "Deployment", "rollout of checkout v2 started")])
    top = ranking(Job.load(job))[0]
    assert top[0] == "checkout" and any("then its service degraded" in r for r in top[2])
    # the same job without the change: checkout's lead is its evidence alone, much smaller
    plain = make_job(tmp_path / "plain")
    assert top[1] > ranking(Job.load(plain))[0][1] + 50


def test_a_harmless_change_adds_nothing(tmp_path):
    job = make_job(tmp_path / "j")
    before = ranking(Job.load(job))
    _with_events(job, [("2024-01-01 00:09:00", "node-1", "Deployment", "agent upgraded on node-1")])
    assert ranking(Job.load(job)) == before
    # but the overview (the prompt's primer) still lists it, with its time
    assert overview(Job.load(job)).startswith("Changes in or shortly before the window (UTC): node-1 Deployment at "
                                              "00:09:00.\n")


def test_of_two_changed_services_that_degraded_the_callee_s_change_comes_first(tmp_path):
    # frontend calls checkout; both were deployed just before the window and both serve worse after it
    job = _with_events(make_job(tmp_path / "j"), [
        ("2024-01-01 00:08:00", "frontend", "Deployment", "rollout of frontend v2 started"),
        ("2024-01-01 00:09:00", "checkout", "Deployment", "rollout of checkout v2 started")])
    found = scores(Job.load(job))
    front = next(why for _, why, src in found["frontend"] if src == "changes")
    assert front.endswith("then its service degraded (so did checkout, a changed callee)")
    assert ranking(Job.load(job))[0][0] == "checkout"


def test_on_a_real_rollout_a_changed_caller_ranks_below_its_changed_callee(job_of):
    # ChangeRCA 2023-09-22_10: checkout and the product catalog both rolled out and both failed calls;
    # checkout calls the catalog, whose defective version is the cause
    path = job_of("2023-09-22_10")
    job = Job.load(path)
    checkout = next(why for _, why, src in scores(job)["checkoutservice"] if src == "changes")
    assert "(so did productcatalogservice, a changed callee)" in checkout
    assert ranking(job)[0][0] == _culprit(path)[0] == "productcatalogservice"


def test_changes_long_before_the_window_do_not_count(tmp_path):
    job = _with_events(make_job(tmp_path / "j"), [("2023-12-31 20:00:00", "checkout", "Deployment", "v2")])
    assert not [s for s in scores(Job.load(job)).get("checkout", []) if s[2] == "changes"]


def test_on_real_rollouts_the_change_signal_names_only_changed_services(imported, labels):
    hits = 0
    for job_id, lab in labels.items():
        if lab["source"] != "changerca":
            continue
        job = Job.load(imported["dest"] / "jobs" / job_id)
        flagged = {e for e, sigs in scores(job).items() if any(src == "changes" for _, _, src in sigs)}
        assert flagged <= set(lab["changed_services"])
        hits += ranking(job)[0][0] == lab["root_causes"][0]["entity"]
        job.con.close()
    assert hits >= 1   # the figures over all cases are the benchmark's (docs/benchmarks.md), not a test's


RANKING_CODE = ["tools/overview.py", "tools/log_signals.py", "tools/call_signals.py", "tools/common.py", "tools/calls.py",
                "rcagent/onset.py", "rcagent/eval/baselines.py", "rcagent/fusion.py", "rcagent/explain.py"]
NAMES = r"(?i)(trainticket|train-ticket|onlineboutique|online boutique|hipster|sockshop|sock-shop|petsite|" \
        r"petshop|changerca|nezha|\brcd\b|ts-[a-z]+-service|frontend|checkoutservice|adservice|cartservice|" \
        r"currencyservice|\bcarts\b|\bcatalogue\b|queue-master|user-db)"


@pytest.mark.parametrize("path", RANKING_CODE)
def test_no_dataset_system_or_service_name_in_the_ranking_code(path):
    text = (ROOT / path).read_text()
    assert not re.findall(NAMES, text), re.findall(NAMES, text)[:5]


def test_a_new_pod_with_no_history_is_judged_against_its_peers(tmp_path):
    job = make_job(tmp_path / "j")
    con = duckdb.connect()
    rows = con.execute("SELECT * FROM read_parquet(?)", [str(job / "metrics.parquet")]).fetchall()
    # peers: checkout-pod-1 serves 100% throughout; checkout-pod-2 is born in the window and serves 20%
    rows += [(r[0], "checkout-pod-1", "success_rate(%)", 100.0) for r in rows if r[1] == "node-1"]
    rows += [(r[0], "checkout-pod-2", "success_rate(%)", 20.0) for r in rows
             if r[1] == "node-1" and r[0].minute >= 12]
    con.execute("CREATE TABLE metrics (timestamp TIMESTAMP, entity VARCHAR, metric VARCHAR, value DOUBLE)")
    con.executemany("INSERT INTO metrics VALUES (?, ?, ?, ?)", rows)
    con.table("metrics").write_parquet(str(job / "metrics.parquet"))
    ents = con.execute("SELECT * FROM read_parquet(?)", [str(job / "entities.parquet")]).fetchall()
    con.execute("CREATE TABLE entities (id VARCHAR, kind VARCHAR, service VARCHAR, node VARCHAR)")
    con.executemany("INSERT INTO entities VALUES (?, ?, ?, ?)", ents + [("checkout-pod-2", "pod", "checkout", "node-1")])
    con.table("entities").write_parquet(str(job / "entities.parquet"))
    con.close()
    signals = scores(Job.load(job)).get("checkout-pod-2", [])
    assert any("success_rate(%) down" in why and "against its peers" in why for _, why, _ in signals)


def _write(job: Path, table: str, columns: str, rows: list[tuple]) -> None:
    con = duckdb.connect()
    con.execute(f"CREATE TABLE {table} ({columns})")
    con.executemany(f"INSERT INTO {table} VALUES ({', '.join('?' * len(rows[0]))})", rows)
    con.table(table).write_parquet(str(job / f"{table}.parquet"))
    con.close()


LOGS = "timestamp TIMESTAMP, entity VARCHAR, level VARCHAR, message VARCHAR, trace_id VARCHAR"


def _every_six_seconds():
    """(minute, second, timestamp text) every six seconds over make_job's twenty minutes."""
    for minute in range(20):
        for second in range(0, 60, 6):
            yield minute, second, f"2024-01-01 00:{minute:02d}:{second:02d}"


def test_a_routine_log_line_that_stops_flags_its_entity_and_a_busier_warning_does_not(tmp_path):
    job = make_job(tmp_path / "j")
    rows = []
    for minute, second, t in _every_six_seconds():
        rows.append((t, "checkout-pod-1", "INFO", f"{t} INFO c.Pay#39 order {minute}{second} received", None))
        if minute < 10:   # the line at #46 is written on every order until the window
            rows.append((t, "checkout-pod-1", "INFO", f"{t} INFO c.Pay#46 price {second * 7} found", None))
        # frontend warns on every request; in the window it serves twice as many, so twice the warnings
        for _ in range(2 if minute >= 10 else 1):
            rows.append((t, "frontend", "INFO", f"{t} INFO f.Web#10 GET / 200", None))
            rows.append((t, "frontend", "WARN", f"{t} WARN f.Web#12 cache miss for item {second}", None))
    _write(job, "logs", LOGS, rows)
    found = scores(Job.load(job))
    assert any(src == "logs" and "log line stopped" in why and "c.Pay#46" in why
               for _, why, src in found["checkout-pod-1"])
    assert not any(src == "logs" for _, _, src in found.get("frontend", []))


def _warnings(job: Path, text: str) -> Path:
    """frontend logs a request line every six seconds and the warning `text` once a minute until the
    window, then with every request."""
    rows = []
    for minute, second, t in _every_six_seconds():
        rows.append((t, "frontend", "INFO", f"{t} INFO f.Web#10 GET / 200", None))
        if minute >= 10 or second == 0:
            rows.append((t, "frontend", "WARN", f"{t} WARN f.Web#12 {text}", None))
    _write(job, "logs", LOGS, rows)
    return job


def test_a_warning_that_grows_faster_than_the_entity_s_logs_counts(tmp_path):
    job = _warnings(make_job(tmp_path / "j"), "upstream timeout")
    assert any("error-like logs" in why for _, why, _ in scores(Job.load(job))["frontend"])


def test_error_lines_that_name_another_service_weigh_as_a_symptom(tmp_path):
    # the same growth of error lines; in the second job they report another service's failure
    found = {}
    for case, text in (("own", "upstream timeout"), ("named", "no instance of checkout")):
        job = _warnings(make_job(tmp_path / case), text)
        found[case] = next((s, why) for s, why, src in scores(Job.load(job))["frontend"] if src == "logs")
    assert "naming another service" in found["named"][1] and "naming" not in found["own"][1]
    assert found["named"][0] == pytest.approx(found["own"][0] * DEFAULT.symptom)


def test_error_lines_of_a_job_with_no_service_entities_still_count(tmp_path):
    job = _warnings(make_job(tmp_path / "j"), "checkout timed out")
    _write(job, "entities", "id VARCHAR, kind VARCHAR, service VARCHAR, node VARCHAR",
           [("frontend", "unknown", None, None), ("checkout", "unknown", None, None)])
    logs = [why for _, why, src in scores(Job.load(job))["frontend"] if src == "logs"]
    assert logs and "naming" not in logs[0]


def test_on_a_real_job_error_lines_about_another_service_do_not_outrank_the_culprit(job_of):
    # TrainTicket, an exception in one service at 10:45: a caller logs "No instances available for" a
    # third service throughout; those lines weigh as a symptom, and the culprit ranks first
    path = job_of("2023-01-29_10_45")
    job = Job.load(path)
    caller = [why for _, why, src in scores(job)["ts-travel-service"] if src == "logs"]
    assert caller and "100% naming another service" in caller[0]
    assert ranking(job)[0][0] in _culprit(path)


def test_a_caller_slowed_by_its_callee_ranks_below_the_callee(tmp_path):
    # make_job: frontend (320 ms) waits on checkout (300 ms); frontend's own time stays 15-20 ms
    found = scores(Job.load(make_job(tmp_path / "j")))
    front = [why for _, why, src in found["frontend"] if src == "calls"]
    assert any("waiting on callees" in why for why in front)
    assert any("own time per call" in why for _, why, _ in found["checkout"])
    assert not any("own time per call" in why for why in front)
    order = [e for e, _, _ in ranking(Job.load(make_job(tmp_path / "k")), kind="service")]
    assert order.index("checkout") < order.index("frontend")


def test_a_quality_metric_that_improved_is_no_evidence(tmp_path):
    job = make_job(tmp_path / "j")
    con = duckdb.connect()
    rows = con.execute("SELECT * FROM read_parquet(?)", [str(job / "metrics.parquet")]).fetchall()
    con.close()
    # the node's availability was 0 in the baseline (a bad day) and is 100 in the window
    rows += [(r[0], "node-1", "availability_average", 100.0 if r[0].minute >= 10 else 0.0) for r in rows
             if r[1] == "node-1"]
    _write(job, "metrics", "timestamp TIMESTAMP, entity VARCHAR, metric VARCHAR, value DOUBLE", rows)
    assert not any("availability" in why for _, why, _ in scores(Job.load(job)).get("node-1", []))


NO_BASELINE = """id: nobase
system: test
alert: checkout latency high
window: {start: '2024-01-01T00:00:00Z', end: '2024-01-01T00:20:00Z'}
baseline: []
"""


def test_a_window_with_no_baseline_is_split_at_its_onset(tmp_path):
    # every series of make_job steps at minute 12; the job gives the whole 20 minutes as its window
    job = Job.load(make_job(tmp_path / "j", meta=NO_BASELINE))
    assert job.onset is not None and abs((job.onset.end - dt.datetime(2024, 1, 1, 0, 12)).total_seconds()) <= 60
    assert job.baseline == [job.onset] and job.onset.end == job.window.start
    top = ranking(job)
    assert top and top[0][0] in ("checkout", "checkout-pod-1")
    assert "No entity moved" not in overview(job)
    summary = job.summary()
    assert "Flagged window: 2024-01-01 00:00:00 to 2024-01-01 00:20:00 UTC; compared from the onset" in summary
    assert "Baseline: none given; for metrics, traces, logs, which had none: the window before the onset" in summary


def test_a_step_is_found_where_the_series_agree():
    rng = np.random.default_rng(0)
    matrix = rng.normal(0, 1, (40, 30))
    matrix[:10, 18:] += 5          # ten series step at bucket 18, the rest is noise
    matrix[10:15, ::2] = np.nan    # gaps do not matter
    assert int(np.argmax(step_scores(matrix))) + 1 == 18


def _flat_job(tmp_path: Path, levels: dict[str, float]) -> Job:
    """A job with no baseline whose window is one regime: each service's cpu is flat noise around its level
    for all 20 minutes (the fault, if any, began before the window); no traces, logs or events."""
    job = make_job(tmp_path / "flat", meta=NO_BASELINE)
    for table in ("traces", "logs", "events", "relations"):
        (job / f"{table}.parquet").unlink(missing_ok=True)
    rng = np.random.default_rng(1)
    rows = [(f"2024-01-01 00:{m:02d}:{s:02d}", entity, "cpu", level * (1 + 0.05 * rng.normal()))
            for m in range(20) for s in (0, 30) for entity, level in levels.items()]
    _write(job, "metrics", "timestamp TIMESTAMP, entity VARCHAR, metric VARCHAR, value DOUBLE", rows)
    _write(job, "entities", "id VARCHAR, kind VARCHAR, service VARCHAR, node VARCHAR",
           [(entity, "service", entity, None) for entity in levels])
    return Job.load(job)


SERVICES_CPU = {"frontend": 12.0, "cart": 2.0, "payment": 1.0, "email": 0.5, "ads": 3.0, "shipping": 0.8}


def test_a_window_that_is_one_regime_has_no_onset(tmp_path):
    # flat noise: the best split of the real series is no better than the best split of shuffled ones
    job = _flat_job(tmp_path, {**SERVICES_CPU, "checkout": 95.0})
    assert job.onset is None and job.baseline == []


def test_without_any_history_a_service_far_above_the_others_of_its_kind_is_named(tmp_path):
    job = _flat_job(tmp_path, {**SERVICES_CPU, "checkout": 95.0})
    top = ranking(job)
    assert top[0][0] == "checkout" and "off the other services (no baseline)" in top[0][2][0]
    assert "No entity moved" not in overview(job)
    # in a healthy system the busiest services stand out less, and a service below the others is no
    # evidence at all
    healthy = ranking(_flat_job(tmp_path / "healthy", SERVICES_CPU))
    assert max((s for _, s, _ in healthy), default=0.0) < top[0][1]
    assert not {"email", "shipping", "payment"} & {e for e, _, _ in healthy}


def test_on_real_jobs_whose_window_is_all_fault_the_culprit_stands_out_from_the_other_services(imported,
                                                                                                 labels):
    # SockShop's windows start after the injection: without their baseline there is no onset to split at,
    # and only the other services tell how far the culprit is from normal
    first = total = 0
    for job_id, lab in labels.items():
        if lab.get("source") != "rcd":
            continue
        job = Job.load(imported["dest"] / "jobs" / job_id)
        without_baseline(job)
        top = ranking(job)
        total += 1
        first += bool(top) and top[0][0] == lab["root_causes"][0]["entity"]
        job.con.close()
    assert total >= 20 and first >= 0.8 * total, (first, total)


def test_a_pod_far_from_its_replicas_is_flagged_without_a_baseline(tmp_path):
    job = make_job(tmp_path / "j", meta=NO_BASELINE)
    rows = [(f"2024-01-01 00:{m:02d}:00", f"checkout-pod-{i}", "error_rate", 0.5 if i == 3 else 0.01 + 0.001 * i)
            for m in range(20) for i in (1, 2, 3, 4)]
    _write(job, "metrics", "timestamp TIMESTAMP, entity VARCHAR, metric VARCHAR, value DOUBLE", rows)
    _write(job, "entities", "id VARCHAR, kind VARCHAR, service VARCHAR, node VARCHAR",
           [("checkout", "service", "checkout", None), ("frontend", "service", "frontend", None)]
           + [(f"checkout-pod-{i}", "pod", "checkout", "node-1") for i in (1, 2, 3, 4)])
    found = scores(Job.load(job))
    assert any("off its replicas" in why for _, why, _ in found["checkout-pod-3"])
    assert not any("off its replicas" in why for p in (1, 2, 4) for _, why, _ in found.get(f"checkout-pod-{p}", []))


def test_on_real_jobs_without_their_baseline_an_onset_is_found_near_the_injection(imported, labels):
    found = near = total = 0
    for job_id, lab in labels.items():
        if not lab.get("inject_time"):
            continue
        job = Job.load(imported["dest"] / "jobs" / job_id)
        onset = without_baseline(job)
        assert ranking(job), job_id          # never "nothing moved" while series move
        total += 1
        if onset is not None:                # the permutation test may find no shift beyond chance
            assert job.onset.start < onset < job.window.end, job_id
            injected = dt.datetime.fromisoformat(str(lab["inject_time"]).replace("Z", ""))
            found += 1
            near += abs((onset - injected).total_seconds()) <= 120
        job.con.close()
    assert total >= 40 and found >= 0.9 * total and near >= 0.8 * total, (found, near, total)


def test_on_a_real_code_fault_the_stopped_log_line_names_the_culprit(imported, labels):
    named = 0
    for job_id, lab in labels.items():
        if lab.get("fault_type") not in ("exception", "return"):
            continue
        job = Job.load(imported["dest"] / "jobs" / job_id)
        culprit = lab["root_causes"][0]["entity"]
        named += any("log line stopped" in why for _, why, _ in scores(job).get(culprit, []))
        job.con.close()
    assert named >= 3


def _latency_job(tmp_path: Path, caller_rise: float, callee_rise: float) -> Job:
    """frontend calls checkout (topology); both report latency_ms, which rises in the window."""
    job = make_job(tmp_path / f"j{caller_rise}-{callee_rise}")
    rows = [(f"2024-01-01 00:{m:02d}:00", entity, "latency_ms", base + (rise if m >= 10 else 0.0) + (m % 3))
            for m in range(20) for entity, base, rise in (("frontend", 100.0, caller_rise),
                                                          ("checkout", 50.0, callee_rise))]
    _write(job, "metrics", "timestamp TIMESTAMP, entity VARCHAR, metric VARCHAR, value DOUBLE", rows)
    return Job.load(job)


def test_a_caller_whose_latency_rose_no_more_than_its_callee_s_is_waiting_on_it(tmp_path):
    found = scores(_latency_job(tmp_path, caller_rise=400.0, callee_rise=380.0))
    assert any("as much as its callee checkout" in why for _, why, _ in found["frontend"])
    assert not any("as much as its callee" in why for _, why, _ in found["checkout"])
    # the caller's own rise (400 ms) is far beyond its callee's (50 ms): the caller itself slowed
    found = scores(_latency_job(tmp_path, caller_rise=400.0, callee_rise=50.0))
    assert not any("as much as its callee" in why for _, why, _ in found["frontend"])


SHORT_WINDOW = """id: short
system: test
alert: checkout latency high
window: {start: '2024-01-01T00:10:00Z', end: '2024-01-01T00:12:00Z'}
baseline: [{start: '2024-01-01T00:00:00Z', end: '2024-01-01T00:10:00Z'}]
"""


def test_a_rare_call_missing_for_a_while_is_no_outage(tmp_path):
    job = make_job(tmp_path / "j", meta=SHORT_WINDOW)
    con = duckdb.connect()
    spans = con.execute("SELECT * FROM read_parquet(?)", [str(job / "traces.parquet")]).fetchall()
    con.close()
    # frontend called "audit" 1.2 times a minute in the baseline and not in the two-minute window: 2.4
    # calls expected, none seen, which chance explains
    spans += [(f"t{i % 20}", f"r{i}", f"a{i % 20}", dt.datetime(2024, 1, 1, 0, i // 12, (i % 12) * 5), 5.0, "audit",
               "audit", "log", "OK") for i in range(120) if i % 10 < 2]
    _write(job, "traces", SPANS, spans)
    assert not any("STOPPED" in why for _, why, _ in scores(Job.load(job)).get("audit", []))
    assert any("STOPPED" in why for _, why, _ in scores(Job.load(make_outage(tmp_path))).get("checkout", []))


SPANS = ("trace_id VARCHAR, span_id VARCHAR, parent_id VARCHAR, start TIMESTAMP, duration_ms DOUBLE, "
         "service VARCHAR, entity VARCHAR, operation VARCHAR, status VARCHAR")


def _keep_spans(job: Path, where: str) -> None:
    """Rewrite make_job's traces keeping the spans that match this (fixed, test-written) condition."""
    con = duckdb.connect()
    spans = con.execute(f"SELECT * FROM read_parquet(?) WHERE {where}", [str(job / "traces.parquet")]).fetchall()
    con.close()
    _write(job, "traces", SPANS, spans)


def make_outage(tmp_path: Path) -> Path:
    """make_job, but checkout receives no call at all in the window (frontend's spans stay)."""
    job = make_job(tmp_path / "outage")
    _keep_spans(job, "NOT (service = 'checkout' AND start >= '2024-01-01 00:10')")
    return job


def test_calls_lost_upstream_are_no_outage_of_the_callee(tmp_path):
    # checkout gets no call in the window, and neither does the frontend operation that called it (users
    # asked frontend for something else): the calls were lost upstream, checkout is not out
    job = make_job(tmp_path / "j")
    con = duckdb.connect()
    spans = con.execute("""SELECT * REPLACE (CASE WHEN start >= '2024-01-01 00:10' THEN 'GET /other'
                                                  ELSE operation END AS operation)
                           FROM read_parquet(?) WHERE NOT (service = 'checkout' AND start >= '2024-01-01 00:10')""",
                        [str(job / "traces.parquet")]).fetchall()
    con.close()
    _write(job, "traces", SPANS, spans)
    assert not any("incoming calls" in why for _, why, _ in scores(Job.load(job)).get("checkout", []))
    # the same loss while frontend still serves the requests that led to checkout: an outage
    assert any("STOPPED" in why for _, why, _ in scores(Job.load(make_outage(tmp_path))).get("checkout", []))


def test_a_collector_that_covered_half_the_window_fakes_no_drop(tmp_path):
    job = make_job(tmp_path / "j")
    # the trace collector stopped at 00:15, halfway through the window: calls per minute did not change
    _keep_spans(job, "start < '2024-01-01 00:15'")
    loaded = Job.load(job)
    assert loaded.observed_seconds("traces") == pytest.approx(5 * 60, abs=60)
    assert traffic_factor(loaded) == pytest.approx(1.0, abs=0.2)   # not "user traffic halved"
    assert "User traffic" not in overview(loaded)
    assert not any("incoming calls" in why for why in
                   [w for sigs in scores(loaded).values() for _, w, _ in sigs])


def _with_callee(tmp_path: Path, per_minute: tuple[int, int], ms: tuple[float, float]) -> Job:
    """make_job plus a callee "search" of frontend: per_minute calls and ms each, (baseline, window)."""
    job = make_job(tmp_path / "j")
    con = duckdb.connect()
    spans = con.execute("SELECT * FROM read_parquet(?)", [str(job / "traces.parquet")]).fetchall()
    con.close()
    for minute in range(20):
        n, d = (per_minute[1], ms[1]) if minute >= 10 else (per_minute[0], ms[0])
        # children of frontend's request of that minute (make_job: trace t{2m}, span a{2m})
        spans += [(f"t{2 * minute}", f"s{minute}-{i}", f"a{2 * minute}",
                   dt.datetime(2024, 1, 1, 0, minute, i * 60 // n), d + (i % 3), "search", "search", "query", "OK")
                  for i in range(n)]
    _write(job, "traces", SPANS, spans)
    return Job.load(job)


def test_calls_that_got_faster_are_no_evidence(tmp_path):
    found = scores(_with_callee(tmp_path, (10, 10), (40.0, 4.0))).get("search", [])
    assert not any("latency" in why for _, why, _ in found)


def test_more_incoming_calls_are_no_evidence_and_fewer_are(tmp_path):
    # ten times the calls: the callers' doing (traffic, a new call pattern, retries), not the callee's
    assert not any("incoming calls" in why for _, why, _ in
                   scores(_with_callee(tmp_path / "more", (3, 30), (20.0, 20.0))).get("search", []))
    # a third of the calls: requests fail or stall before they reach it
    assert any("incoming calls 30->10/min" in why for _, why, _ in
               scores(_with_callee(tmp_path / "fewer", (30, 10), (20.0, 20.0))).get("search", []))


def test_a_deviation_already_there_before_the_onset_weighs_less(tmp_path):
    job = make_job(tmp_path / "j")
    con = duckdb.connect()
    rows = con.execute("SELECT * FROM read_parquet(?)", [str(job / "metrics.parquet")]).fetchall()
    con.close()
    # the node's disk reads are higher all through the window (another day's workload); everything else
    # of make_job steps at minute 12, two minutes into the window
    rows += [(r[0], "node-1", "disk_reads", 90.0 if r[0].minute >= 10 else 30.0 + r[0].minute % 3) for r in rows
             if r[1] == "node-1" and r[2] == "cpu"]
    _write(job, "metrics", "timestamp TIMESTAMP, entity VARCHAR, metric VARCHAR, value DOUBLE", rows)
    loaded = Job.load(job)
    disk = [(s, why) for s, why, _ in scores(loaded)["node-1"] if "disk_reads" in why]
    cpu = [(s, why) for s, why, _ in scores(loaded)["checkout-pod-1"] if why.startswith("cpu")]
    assert disk and re.search(r"already so before the onset at 00:1[12]:", disk[0][1])   # 20 s buckets
    assert cpu and "before the onset" not in cpu[0][1]
    plain = scores(loaded, replace(DEFAULT, preexisting=1.0))
    assert disk[0][0] == pytest.approx(0.5 * next(s for s, why, _ in plain["node-1"] if "disk_reads" in why))


def test_on_a_real_job_the_load_of_another_day_is_told_from_the_fault(job_of):
    # TrainTicket: traces and logs compare with a fault-free period hours earlier; a CPU fault at 14:23:31
    path = job_of("2023-01-29_14_23")
    lab = yaml.safe_load((path.parent.parent / "labels" / f"{path.name}.yaml").read_text())
    job = Job.load(path)
    found = scores(job)
    culprit = lab["root_causes"][0]["entity"]
    assert not any("before the onset" in why for _, why, _ in found[culprit])
    assert any("before the onset" in why for sigs in found.values() for _, why, _ in sigs)
    assert ranking(job)[0][0] in (culprit, lab["root_causes"][0]["service"])


def test_only_a_signal_seen_before_the_onset_is_marked_so(tmp_path):
    job = make_job(tmp_path / "j")
    con = duckdb.connect()
    rows = con.execute("SELECT * FROM read_parquet(?)", [str(job / "metrics.parquet")]).fetchall()
    con.close()
    # a client-side latency that rises with everything else at minute 12, weighed 0 (a setting one may choose)
    rows += [(r[0], "frontend", "client_latency_ms", r[3] + 5) for r in rows if r[1] == "frontend"]
    _write(job, "metrics", "timestamp TIMESTAMP, entity VARCHAR, metric VARCHAR, value DOUBLE", rows)
    found = scores(Job.load(job), replace(DEFAULT, client_weight=0.0))["frontend"]
    client = [why for s, why, _ in found if why.startswith("client_latency_ms")]
    assert client and not any("before the onset" in why for why in client)


METRICS = "timestamp TIMESTAMP, entity VARCHAR, metric VARCHAR, value DOUBLE"


def _add_metrics(job: Path, series: dict[tuple[str, str], tuple[float, float]]) -> None:
    """make_job's metrics plus each (entity, metric): its value in the baseline and from minute 12 on."""
    con = duckdb.connect()
    rows = con.execute("SELECT * FROM read_parquet(?)", [str(job / "metrics.parquet")]).fetchall()
    con.close()
    rows += [(dt.datetime(2024, 1, 1, 0, minute), entity, metric, (hi if minute >= 12 else lo) + 0.001 * (minute % 3))
             for (entity, metric), (lo, hi) in series.items() for minute in range(20)]
    _write(job, "metrics", METRICS, rows)


def _add_entities(job: Path, entities: list[tuple]) -> None:
    """make_job's entities plus these (id, kind, service, node)."""
    con = duckdb.connect()
    rows = con.execute("SELECT * FROM read_parquet(?)", [str(job / "entities.parquet")]).fetchall()
    con.close()
    _write(job, "entities", "id VARCHAR, kind VARCHAR, service VARCHAR, node VARCHAR", rows + entities)


def _metric_score(job: Job, entity: str, metric: str) -> float:
    return next(s for s, why, _ in scores(job)[entity] if why.startswith(metric + " "))


def test_slower_outgoing_calls_of_a_pod_that_serves_as_fast_weigh_less(tmp_path):
    # a pod's client-side p99 jumps from 5 ms to 28.8 s (one slow call of a sparse series) while the
    # latency of the requests it serves stays flat: background work, not what its users wait on
    flat = tmp_path / "flat"
    _add_metrics(make_job(flat), {("checkout-pod-1", "client_latency_p99_s"): (0.005, 28.8),
                                  ("checkout-pod-1", "server_latency_p99_s"): (0.02, 0.02)})
    rose = tmp_path / "rose"
    _add_metrics(make_job(rose), {("checkout-pod-1", "client_latency_p99_s"): (0.005, 28.8),
                                  ("checkout-pod-1", "server_latency_p99_s"): (0.02, 2.0)})
    background, served = (_metric_score(Job.load(j), "checkout-pod-1", "client_latency_p99_s") for j in (flat, rose))
    assert background == pytest.approx(DEFAULT.client_weight * served)


def test_the_users_entry_point_is_measured_from_outside(tmp_path):
    # the entry's latency is the whole system's, seen by its users: weighed as a client-side measurement
    job = make_job(tmp_path / "j")
    _add_entities(job, [("entry", "entry", None, None), ("gateway", "service", "gateway", None)])
    _add_metrics(job, {("entry", "latency_p90_s"): (0.1, 3.0), ("gateway", "latency_p90_s"): (0.1, 3.0)})
    loaded = Job.load(job)
    assert _metric_score(loaded, "entry", "latency_p90_s") == pytest.approx(
        DEFAULT.client_weight * _metric_score(loaded, "gateway", "latency_p90_s"))


def test_a_slower_entity_whose_own_time_did_not_grow_is_waiting(tmp_path):
    # no topology: only the traces tell that frontend's slower requests are checkout's time (frontend's own
    # time per call stays 15-20 ms while its latency rises 30 -> 310 ms)
    job = make_job(tmp_path / "j")
    _write(job, "relations", "src VARCHAR, dst VARCHAR, kind VARCHAR", [("checkout-pod-1", "checkout", "instance_of")])
    found = scores(Job.load(job))
    frontend = next((s, why) for s, why, _ in found["frontend"] if why.startswith("latency_ms"))
    checkout = next((s, why) for s, why, _ in found["checkout"] if why.startswith("latency_ms"))
    assert "own time per call did not grow" in frontend[1] and "own time" not in checkout[1]
    assert frontend[0] == pytest.approx(DEFAULT.symptom * checkout[0], rel=0.05)


def _culprit(path: Path) -> tuple[str, str]:
    lab = yaml.safe_load((path.parent.parent / "labels" / f"{path.name}.yaml").read_text())
    return lab["root_causes"][0]["entity"], lab["root_causes"][0]["service"]


def test_on_a_real_job_calls_lost_upstream_are_no_outage(job_of):
    # TrainTicket, an exception in one service at 10:20: the requests that led to two other services
    # stopped reaching their callers, so those services got no calls; they are not called out
    path = job_of("2023-01-29_10_20")
    job = Job.load(path)
    found = scores(job)
    stopped = [e for e, sigs in found.items() if any("STOPPED" in why for _, why, _ in sigs)]
    assert stopped == []
    assert ranking(job)[0][0] in _culprit(path)


def test_on_a_real_job_a_caller_that_waits_is_told_by_its_own_time(job_of):
    # Online Boutique, network delay on one pod at 04:27: the front end's served latency rose but its own
    # time per call (traces) did not, or no more than a callee's did, so it ranks below the delayed pod
    path = job_of("2022-08-22_04_27")
    job = Job.load(path)
    front = [why for _, why, _ in scores(job).get("frontend", []) if "ServerLatency" in why]
    assert front and all("own time per call did not grow" in why or "as much as its callee" in why for why in front)
    # (the delayed pod's only signal is its network bytes: with the defaults it weighs as resource use alone)
    order = [e for e, _, _ in ranking(job, kind="pod", params=replace(DEFAULT, resource_only=1.0))]
    assert order.index(_culprit(path)[0]) < order.index(next(e for e in order if e.startswith("frontend")))


def _two_callees(tmp_path: Path, extra_ms: dict[str, float], more: tuple[str, ...] = ()) -> Job:
    """make_job with traces of its own: frontend calls checkout in one kind of request and search in another
    (and each of `more` in a kind of its own), one child each; in the window, frontend's span of a call to X
    lasts extra_ms[X] longer than before around the same child (the time between the two services)."""
    job = make_job(tmp_path / "j")
    spans = []
    for minute in range(20):
        for i in range(6):
            at = dt.datetime(2024, 1, 1, 0, minute, i * 10)
            for callee, child_ms in (("checkout", 20.0), ("search", 10.0), *((m, 5.0) for m in more)):
                gap = 2.0 + (extra_ms.get(callee, 0.0) if minute >= 10 else 0.0) + 0.1 * (i % 3)
                trace = f"{callee}-{minute}-{i}"
                spans += [(trace, f"{trace}-p", None, at, child_ms + gap, "frontend", "frontend", f"GET /{callee}",
                           "OK"),
                          (trace, f"{trace}-c", f"{trace}-p", at, child_ms, callee, callee, callee, "OK")]
    _write(job, "traces", SPANS, spans)
    return Job.load(job)


def test_a_gap_that_widened_on_every_call_of_one_caller_is_the_callers_side(tmp_path):
    found = scores(_two_callees(tmp_path / "both", {"checkout": 50.0, "search": 50.0}))
    gaps = {e: [why for _, why, _ in sigs if why.startswith("cross-span gap")] for e, sigs in found.items()}
    assert gaps["frontend"] and "grew on 2 of its 2 callees" in gaps["frontend"][0]
    assert not gaps.get("checkout") and not gaps.get("search")
    # widened far on two of four callees, a little (a few ms) on the others: still the caller's side
    found = scores(_two_callees(tmp_path / "most", {"checkout": 50.0, "search": 50.0, "cart": 3.0, "ads": 3.0},
                                more=("cart", "ads")))
    gaps = {e: [why for _, why, _ in sigs if why.startswith("cross-span gap")] for e, sigs in found.items()}
    assert gaps["frontend"] and "grew on 4 of its 4 callees" in gaps["frontend"][0]
    assert not any(gaps.get(c) for c in ("checkout", "search", "cart", "ads"))
    # but widened on two of five with no change on the other three: the two callees' side
    found = scores(_two_callees(tmp_path / "few", {"checkout": 50.0, "search": 50.0}, more=("cart", "ads", "mail")))
    gaps = {e: [why for _, why, _ in sigs if why.startswith("cross-span gap")] for e, sigs in found.items()}
    assert not gaps.get("frontend") and gaps["checkout"] and gaps["search"]
    # one callee's calls only: its side (its network, its queue), not the caller's
    found = scores(_two_callees(tmp_path / "one", {"search": 50.0}))
    gaps = {e: [why for _, why, _ in sigs if why.startswith("cross-span gap")] for e, sigs in found.items()}
    assert gaps["search"] and "widened on 1 of its 1 callers" in gaps["search"][0]
    assert not gaps.get("frontend") and not gaps.get("checkout")


def test_on_a_real_job_a_starved_caller_owns_the_gaps_of_its_calls(job_of):
    # Online Boutique, CPU contention on the front end at 03:53: the gap widened on its calls to every
    # callee, which is the front end's side, not its callees'
    path = job_of("2022-08-22_03_53")
    job = Job.load(path)
    found = scores(job)
    front = [why for _, why, _ in found["frontend"] if why.startswith("cross-span gap")]
    assert front and re.search(r"grew on (\d+) of its \1 callees", front[0])
    assert not any(why.startswith("cross-span gap") for _, why, _ in found.get("productcatalogservice", []))
    assert ranking(job)[0][0] in _culprit(path)
    # CPU exhausted on the front end at 04:10: the gap widened far on two of its seven callees and grew a
    # little on the other five: the front end's side again, and it ranks first
    path = job_of("2022-08-22_04_10")
    found = scores(Job.load(path))
    front = [why for _, why, _ in found["frontend"] if why.startswith("cross-span gap")]
    assert front and "grew on 7 of its 7 callees" in front[0]
    assert not any(why.startswith("cross-span gap") for _, why, _ in found.get("checkoutservice", []))
    assert ranking(Job.load(path))[0][0] in _culprit(path)


def test_an_entity_that_calls_nothing_waits_on_nothing():
    # a leaf's time is all its own: its slower calls are never put down to waiting on callees, however
    # little its mean own time grew
    rows = {"own": {"leaf": (47.0 * 400, 57.0 * 500), "caller": (47.0 * 400, 57.0 * 500)}, "callers": {"caller"}}
    assert own_time_rose(rows, "leaf", 400, 500, DEFAULT) is False
    assert not waits(rows, "leaf", False) and waits(rows, "caller", False)


def test_an_entity_with_no_sign_of_serving_worse_weighs_less(tmp_path):
    # the node's disk reads triple and a pod's client-side latency jumps: resources and a view of others;
    # checkout's own latency and errors rise: it serves worse
    job = make_job(tmp_path / "j")
    _add_entities(job, [("batch", "service", "batch", None)])
    _add_metrics(job, {("node-1", "disk_reads"): (30.0, 90.0), ("batch", "client_latency_s"): (0.01, 2.0)})
    loaded = Job.load(job)
    weighed = {e: s for e, s, _ in ranking(loaded)}
    plain = {e: s for e, s, _ in ranking(loaded, params=replace(DEFAULT, resource_only=1.0))}
    for entity in ("node-1", "batch"):
        assert weighed[entity] == pytest.approx(DEFAULT.resource_only * plain[entity], abs=0.1)
    assert weighed["checkout"] == plain["checkout"]


def test_on_a_real_job_resource_use_alone_weighs_less_than_serving_worse(job_of):
    # TrainTicket, an exception in one service at 10:50: another pod's syscalls rise five-fold and its
    # client-side latency jumps, but nothing it serves got worse; the culprit's routine line stopped
    path = job_of("2023-01-29_10_50")
    job = Job.load(path)
    assert ranking(job)[0][0] in _culprit(path)
    plain = ranking(job, params=replace(DEFAULT, resource_only=1.0))
    assert plain[0][0] not in _culprit(path)


def test_a_routine_log_line_that_fell_to_a_fraction_flags_its_entity_and_a_rare_one_does_not(tmp_path):
    rows = []
    for minute, second, t in _every_six_seconds():
        rows.append((t, "checkout-pod-1", "INFO", f"{t} INFO c.Pay#39 order {minute}{second} received", None))
        # #46 is written on every order until the window, then on one in five (an exception thrown before it)
        if minute < 10 or second % 30 == 0:
            rows.append((t, "checkout-pod-1", "INFO", f"{t} INFO c.Pay#46 price {second * 7} found", None))
        # frontend's #20 was seen three times in the baseline: a share of three lines proves nothing
        rows.append((t, "frontend", "INFO", f"{t} INFO f.Web#10 GET / 200", None))
        if minute in (2, 5, 8) and second == 0 or minute >= 10 and second == 0 and minute % 5 == 0:
            rows.append((t, "frontend", "INFO", f"{t} INFO f.Web#20 cache refreshed", None))
    job = make_job(tmp_path / "j")
    _write(job, "logs", LOGS, rows)
    found = scores(Job.load(job))
    assert any(src == "logs" and "log line fell to 20 (60 expected)" in why and "c.Pay#46" in why
               for _, why, src in found["checkout-pod-1"])
    assert not any(src == "logs" for _, _, src in found.get("frontend", []))
    # with the share set to 0 only a line that stopped counts
    found = scores(Job.load(job), replace(DEFAULT, line_fell=0.0))
    assert not any("log line fell" in why for _, why, _ in found["checkout-pod-1"])


def test_on_a_real_code_fault_a_log_line_that_fell_names_the_culprit(job_of):
    # TrainTicket, an exception in one service at 11:04: the line it wrote on most queries before the
    # window it writes on few of them in it; nothing else of it moved
    path = job_of("2023-01-29_11_04")
    job = Job.load(path)
    top, _, reasons = ranking(job)[0]
    assert top in _culprit(path)
    assert any("log line fell" in why for why in reasons)


def test_traces_that_ended_before_the_window_cover_none_of_it(tmp_path):
    job = make_job(tmp_path / "j")
    # the collector stopped 30 s before the window (make_job's window starts at 00:10)
    _keep_spans(job, "start < '2024-01-01 00:09:40'")
    loaded = Job.load(job)
    assert loaded.observed_seconds("traces") == 0
    assert not any("incoming calls" in why for sigs in scores(loaded).values() for _, why, _ in sigs)


def test_on_a_real_job_traces_that_ended_early_fake_no_outage(job_of):
    # Online Boutique, CPU contention at 04:36: the traces end a minute into the window, before the onset
    # the window is split at; the front end did not stop receiving calls, and the starved pod ranks first
    path = job_of("2022-08-22_04_36")
    job = Job.load(path)
    assert not any("STOPPED" in why for sigs in scores(job).values() for _, why, _ in sigs)
    assert ranking(job)[0][0] in _culprit(path)


def test_on_a_real_job_a_caller_that_calls_a_slow_callee_in_a_loop_waits_on_it(job_of):
    # Online Boutique, CPU contention on one pod at 05:18: the front end calls it several times per
    # request, so its latency rose by several times the callee's; it waits on it and ranks below it
    path = job_of("2022-08-22_05_18")
    job = Job.load(path)
    culprit, service = _culprit(path)
    assert ranking(job)[0][0] in (culprit, service)
    front = next(e for e in job.entities if e.startswith("frontend") and job.entities[e].kind == "pod")
    assert any(f"as much as its callee {service}" in why for _, why, _ in scores(job)[front])


def _bursty_callee(tmp_path: Path, burst_seconds: int) -> Job:
    """make_job plus a callee "search" of frontend, 10 calls a minute of 20 ms, slowed to 400 ms for the
    window's first `burst_seconds`."""
    job = make_job(tmp_path / f"j{burst_seconds}")
    con = duckdb.connect()
    spans = con.execute("SELECT * FROM read_parquet(?)", [str(job / "traces.parquet")]).fetchall()
    con.close()
    for minute in range(20):
        for i in range(10):
            at = dt.datetime(2024, 1, 1, 0, minute, i * 6)
            slow = 0 <= (at - dt.datetime(2024, 1, 1, 0, 10)).total_seconds() < burst_seconds
            spans.append((f"t{2 * minute}", f"s{minute}-{i}", f"a{2 * minute}", at, (400.0 if slow else 20.0) + i % 3,
                          "search", "search", "query", "OK"))
    _write(job, "traces", SPANS, spans)
    return Job.load(job)


def test_a_burst_of_slow_calls_is_no_sustained_latency_change(tmp_path):
    # one slow half-minute in a ten-minute window (a periodic job, a pause): its p95 rose, its typical
    # latency did not; slow for the whole window, it did
    assert not any("latency" in why for _, why, _ in scores(_bursty_callee(tmp_path, 30)).get("search", []))
    assert any("latency p95 22->402 ms" in why for _, why, _ in scores(_bursty_callee(tmp_path, 600))["search"])


def test_on_a_real_job_bursts_of_a_busy_service_do_not_outrank_the_culprit(job_of):
    # TrainTicket, a wrong return value in one service at 09:30: a busy service's calls were slow in two
    # half-minutes of the window (it is so at other times of that day too) and ranked first on its p95
    path = job_of("2023-01-29_09_30")
    job = Job.load(path)
    assert ranking(job)[0][0] in _culprit(path)
