"""The evidence ranking's change signals: a change followed by a degradation of the changed entity, harmless
changes, two changed services on one call path; on made-up jobs and on real defective rollouts."""
from __future__ import annotations

from pathlib import Path

import duckdb

from rcagent.job import Job
from rcagent.tools.overview import overview, ranking, scores
from tests.evidence_jobs import culprit_of
from tests.hostile import make_job


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
    assert ranking(job)[0][0] == culprit_of(path)[0] == "productcatalogservice"


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
