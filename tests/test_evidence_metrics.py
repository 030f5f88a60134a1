"""The evidence ranking's metric signals: floors in the metric's unit (a success rate, a time in seconds, a
count of events), a new pod against its peers, improvements ignored, client-side and entry-point
measurements, and an entity whose resource use alone moved; on small made-up series and on real cases."""
from __future__ import annotations

import datetime as dt
from dataclasses import replace
from pathlib import Path

import duckdb
import pytest

from rcagent.job import Job
from rcagent.tools.common import deviation, flawless_requests, metric_stats, second
from rcagent.tools.overview import DEFAULT, ranking, scores
from tests.evidence_jobs import culprit_of, write_table
from tests.hostile import make_job


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
    # the unit read however the exporter spells it: Prometheus' base units, OTLP's unit field
    for name in ("http_request_duration_seconds:mean", "rpc.server.duration:mean(s)", "LatencyP90(s)"):
        assert abs(deviation(0.005, 0.0005, 0.005, 0.007, name)) < 1, name
    assert abs(deviation(5.0, 0.5, 5.0, 7.0, "rpc_duration_ms_p99")) < 1
    assert deviation(0.005, 0.0005, 0.005, 0.007, "http_request_duration_seconds:mean") < deviation(
        0.005, 0.0005, 0.005, 0.007, "http_request_duration:mean")   # no unit: 10% of the mean, 0.5 ms


def test_a_count_of_events_is_floored_at_its_poisson_noise():
    # a rarely called endpoint: none in the baseline, three in the window, is no outage
    assert deviation(0.0, 0.0, 0.0, 3.0, "requests_sum") <= 3
    # a workload in operations is a count too: 0 -> 0.13 ops (a quiet pod's two minutes) read as 133 sd
    assert deviation(0.0, 0.0, 0.0, 0.133, "PodWorkload(Ops)") < 1
    assert deviation(0.0, 0.0, 0.0, 3.0, "queue_depth") >= 999        # not a count: the old absolute floor
    # a busy one that doubled still counts, by far
    assert deviation(400.0, 5.0, 790.0, 800.0, "requests_sum") >= 10


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


def test_a_quality_metric_that_improved_is_no_evidence(tmp_path):
    job = make_job(tmp_path / "j")
    con = duckdb.connect()
    rows = con.execute("SELECT * FROM read_parquet(?)", [str(job / "metrics.parquet")]).fetchall()
    con.close()
    # the node's availability was 0 in the baseline (a bad day) and is 100 in the window
    rows += [(r[0], "node-1", "availability_average", 100.0 if r[0].minute >= 10 else 0.0) for r in rows
             if r[1] == "node-1"]
    write_table(job, "metrics", "timestamp TIMESTAMP, entity VARCHAR, metric VARCHAR, value DOUBLE", rows)
    assert not any("availability" in why for _, why, _ in scores(Job.load(job)).get("node-1", []))


METRICS = "timestamp TIMESTAMP, entity VARCHAR, metric VARCHAR, value DOUBLE"


def _add_metrics(job: Path, series: dict[tuple[str, str], tuple[float, float]]) -> None:
    """make_job's metrics plus each (entity, metric): its value in the baseline and from minute 12 on."""
    con = duckdb.connect()
    rows = con.execute("SELECT * FROM read_parquet(?)", [str(job / "metrics.parquet")]).fetchall()
    con.close()
    rows += [(dt.datetime(2024, 1, 1, 0, minute), entity, metric, (hi if minute >= 12 else lo) + 0.001 * (minute % 3))
             for (entity, metric), (lo, hi) in series.items() for minute in range(20)]
    write_table(job, "metrics", METRICS, rows)


def _add_entities(job: Path, entities: list[tuple]) -> None:
    """make_job's entities plus these (id, kind, service, node)."""
    con = duckdb.connect()
    rows = con.execute("SELECT * FROM read_parquet(?)", [str(job / "entities.parquet")]).fetchall()
    con.close()
    write_table(job, "entities", "id VARCHAR, kind VARCHAR, service VARCHAR, node VARCHAR", rows + entities)


def _metric_score(job: Job, entity: str, metric: str) -> float:
    return next(s for s, why, _ in scores(job)[entity] if why.startswith(metric + " "))


def _job_with(tmp_path: Path, rows: list[tuple], entities: list[tuple]) -> Path:
    """The made-up job with these metric rows added to its own, and these entities."""
    job = make_job(tmp_path / "j")
    con = duckdb.connect()
    own = con.execute("SELECT * FROM read_parquet(?)", [str(job / "metrics.parquet")]).fetchall()
    con.close()
    write_table(job, "metrics", METRICS, own + rows)
    _add_entities(job, entities)
    return job


def test_calls_that_began_from_none_are_no_change_of_their_callee_but_errors_from_none_are(tmp_path):
    # table-1 got no requests before minute 12 and 40 a minute after (a caller began to call it), and
    # from none to 5 errors; table-2 got 2 requests a minute before and 40 after
    rows = []
    for minute in range(20):
        t = dt.datetime(2024, 1, 1, 0, minute)
        rows += [(t, "table-1", "requests_sum", 40.0 if minute >= 12 else 0.0),
                 (t, "table-1", "errors_sum", 5.0 if minute >= 12 else 0.0),
                 (t, "table-2", "requests_sum", 40.0 if minute >= 12 else 2.0)]
    job = _job_with(tmp_path, rows, [("table-1", "database", None, None), ("table-2", "database", None, None)])
    found = scores(Job.load(job))
    assert not any(why.startswith("requests_sum") for _, why, _ in found["table-1"])
    assert any(why.startswith("errors_sum up") for _, why, _ in found["table-1"])
    assert any(why.startswith("requests_sum up") for _, why, _ in found["table-2"])


def test_a_success_rate_over_a_known_count_of_requests_moves_by_whole_requests(tmp_path):
    # function-1 serves 4 requests a sample and was seen for three flawless samples (12 requests): 2 failures
    # of 4 (100% -> 50%) is within chance of so few; service-1 serves 1000 a sample and never failed one of
    # its baseline's 10,000: 5 failures a sample (100% -> 99.5%) is no chance, though below the one point
    # a rate's name alone is given; function-2 and service-2 have no request count, so the floor stays
    rows = []
    for minute in range(20):
        t = dt.datetime(2024, 1, 1, 0, minute)
        rows += [(t, "service-1", "requests_sum", 1000.0)]
        rows += [(t, e, "availability_average", 99.5 if minute >= 12 else 100.0) for e in ("service-1", "service-2")]
        if minute >= 7:
            rows += [(t, "function-1", "requests_sum", 4.0)]
            rows += [(t, e, "availability_average", 50.0 if minute >= 12 else 100.0)
                     for e in ("function-1", "function-2")]
    job = _job_with(tmp_path, rows, [("function-1", "function", None, None), ("function-2", "function", None, None),
                                     ("service-1", "service", "service-1", None),
                                     ("service-2", "service", "service-2", None)])
    found = scores(Job.load(job))
    rates = {e: [why for _, why, _ in found.get(e, []) if why.startswith("availability")]
             for e in ("function-1", "function-2", "service-1", "service-2")}
    assert rates == {"function-1": [], "function-2": ["availability_average down 50 sd"],
                     "service-1": ["availability_average down 9 sd"], "service-2": []}
    # the metrics tool scores each series by the same rule
    shown = {r["entity"]: round(r["score"]) for r in metric_stats(Job.load(job), list(rates), "availability")}
    assert shown == {"function-1": -2, "function-2": -50, "service-1": -9, "service-2": 0}


@pytest.mark.parametrize("peers", [False, True])
def test_a_short_flawless_record_borrows_the_flawless_record_of_all(tmp_path, peers):
    # a baseline of two samples: service-1 served 130 requests a sample without a failure, then fails 2 of
    # 130 (98.5%); function-1 served 4 without a failure, then fails 2 of 4. Alone, 260 flawless requests
    # allow a failure share near 1% (rule of three): 1.5 points is chance. Beside service-2, which served
    # 3,000 a sample without a failure, 2 failures of 130 are not; function-1's 4 requests a sample are too
    # few for any record (one failure is 25 points of a sample): it keeps its own
    counts = {"service-1": 130.0, "function-1": 4.0, **({"service-2": 3000.0} if peers else {})}
    after = {"service-1": 98.5, "function-1": 50.0, "service-2": 100.0}
    rows = []
    for minute in range(8, 20):
        t = dt.datetime(2024, 1, 1, 0, minute)
        rows += [(t, e, "requests_sum", n) for e, n in counts.items()]
        rows += [(t, e, "availability_average", after[e] if minute >= 12 else 100.0) for e in counts]
        rows += [(t, "service-2", "success_rate", 1.0)] if peers else []     # a second rate: counted once
    job = _job_with(tmp_path, rows, [("function-1", "function", None, None), ("service-1", "service", "service-1", None),
                                     ("service-2", "service", "service-2", None)])
    assert flawless_requests(Job.load(job)) == 2 * sum(counts.values())     # the two baseline samples
    found = scores(Job.load(job))
    named = {e for e in ("service-1", "function-1") if any(why.startswith("availability") for _, why, _ in found.get(e, []))}
    assert named == ({"service-1"} if peers else set())
    # the metrics tool scores the series by the same rule
    shown = {r["entity"]: r["score"] for r in metric_stats(Job.load(job), ["service-1"], "availability")}
    assert (shown["service-1"] < -DEFAULT.z_min) == peers


def test_a_latency_quantile_of_fewer_requests_than_it_needs_is_one_requests_time(tmp_path):
    # function-1 serves 4 requests a sample: its p95 is its slowest request, its mean of under 5 one or two;
    # service-1 serves 12: its mean and median count, its p95 (which needs 20) does not; service-2 serves
    # 1000; service-3 has no request count, and service-4 a rate per second (4 a second is 240 a sample of
    # a minute), so nothing changes for them
    rows = []
    counts = {"function-1": 4.0, "service-1": 12.0, "service-2": 1000.0}
    others = ["service-3", "service-4"]
    for minute in range(20):
        t = dt.datetime(2024, 1, 1, 0, minute)
        rows += [(t, e, "requests_sum", n) for e, n in counts.items()]
        rows += [(t, "service-4", "requests_per_second", 4.0)]
        rows += [(t, e, m, 3.0 if minute >= 12 else 0.5) for e in [*counts, *others]
                 for m in ("latency_p95", "latency_p50", "latency_average")]
    job = _job_with(tmp_path, rows, [("function-1", "function", None, None)]
                    + [(e, "service", e, None) for e in ("service-1", "service-2", *others)])
    found = scores(Job.load(job))
    latencies = {e: sorted(why.split()[0] for _, why, _ in found.get(e, []) if why.startswith("latency"))
                 for e in [*counts, *others]}
    every = ["latency_average", "latency_p50", "latency_p95"]
    assert latencies == {"function-1": [], "service-1": ["latency_average", "latency_p50"],
                         "service-2": every, "service-3": every, "service-4": every}


def test_on_a_real_job_a_callee_latency_of_a_few_requests_neither_names_it_nor_excuses_its_caller(job_of):
    # PetSite: the search service (976 requests a sample) slows; the bucket it reads from has a request or
    # two a sample, and its latency of those few came first and made the service's rise look like waiting
    path = job_of("low_traffic/train/issue_4")
    job = Job.load(path)
    first, _, reasons = ranking(job)[0]
    assert first in culprit_of(path)
    assert not any("as much as its callee S3" in why for why in reasons)


def test_on_a_real_job_a_few_failures_of_a_service_that_never_failed_name_it(job_of):
    # PetSite: the adoption list service failed none of the 80,000 requests of its two-day baseline; in the
    # window 2 of 130 and 3 of 142 (98.5%, 97.9%), under the one point a rate's name is given: 1.5 sd, nothing
    path = job_of("low_traffic/test/issue_17")
    first, _, reasons = ranking(Job.load(path))[0]
    assert first in culprit_of(path)
    assert any(why.startswith("availability_average down") for why in reasons)


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
    assert ranking(job)[0][0] in culprit_of(path)
    plain = ranking(job, params=replace(DEFAULT, resource_only=1.0))
    assert plain[0][0] not in culprit_of(path)
