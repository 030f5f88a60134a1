"""The evidence ranking's caller that no longer calls (tools/stopped_calls.py): two callees that only it calls
stop receiving requests while it still serves its own; on made-up metrics and on a real case."""
from __future__ import annotations

import datetime as dt
from pathlib import Path

from rcagent.job import Job
from rcagent.onset import without_baseline
from rcagent.tools.overview import ranking, scores
from tests.evidence_jobs import culprit_of, write_table
from tests.hostile import META

STOPPED = "stopped while it still served requests"


def _job(tmp_path: Path, traffic: dict[str, list[float]], extra: list[tuple] = ()) -> Job:
    """checkout (one pod) calls payment and email (only it) and cart (the front end too); each entity's
    request count a minute is traffic[entity] (20 minutes: the baseline 0-9, the window 10-19)."""
    job = tmp_path / "j"
    job.mkdir(parents=True)
    (job / "job.yaml").write_text(META.format(id="stopped"))
    services = ["frontend", "checkout", "payment", "email", "cart"]
    write_table(job, "entities", "id VARCHAR, kind VARCHAR, service VARCHAR, node VARCHAR",
                [(s, "service", s, None) for s in services] + [("checkout-1", "pod", "checkout", None)])
    write_table(job, "relations", "src VARCHAR, dst VARCHAR, kind VARCHAR",
                [("frontend", "checkout", "calls"), ("frontend", "cart", "calls"), ("checkout", "payment", "calls"),
                 ("checkout", "email", "calls"), ("checkout", "cart", "calls"),
                 ("checkout-1", "checkout", "instance_of")])
    rows = [(dt.datetime(2024, 1, 1, 0, m), entity, "requests", value)
            for entity, values in traffic.items() for m, value in enumerate(values)]
    write_table(job, "metrics", "timestamp TIMESTAMP, entity VARCHAR, metric VARCHAR, value DOUBLE",
                rows + list(extra))
    return Job.load(job)


STEADY = [30.0 + m % 3 for m in range(20)]
STOPS = [10.0 + m % 2 if m < 13 else 0.0 for m in range(20)]   # stops at minute 13, inside the window


def _named(job: Job) -> list[str]:
    return [e for e, sigs in scores(job).items() if any(STOPPED in why for _, why, _ in sigs)]


def test_a_caller_whose_only_callees_stopped_while_it_served_is_named(tmp_path):
    job = _job(tmp_path, {"frontend": STEADY, "checkout-1": STEADY, "payment": STOPS, "email": STOPS,
                          "cart": STEADY})
    assert sorted(_named(job)) == ["checkout", "checkout-1"]
    assert ranking(job)[0][0] in ("checkout", "checkout-1")
    reason = next(why for _, why, _ in scores(job)["checkout"] if STOPPED in why)
    assert reason.startswith("its calls to email, payment stopped")


def test_one_callee_that_stopped_may_be_down_itself_and_names_no_caller(tmp_path):
    job = _job(tmp_path, {"frontend": STEADY, "checkout-1": STEADY, "payment": STOPS, "email": STEADY,
                          "cart": STEADY})
    assert _named(job) == []


def test_a_caller_that_stopped_serving_too_is_not_named(tmp_path):
    # no requests reached the caller either: its own callers stopped calling, the stop is upstream of it
    job = _job(tmp_path, {"frontend": STEADY, "checkout-1": STOPS, "payment": STOPS, "email": STOPS,
                          "cart": STEADY})
    assert _named(job) == []


def test_a_caller_whose_other_callee_got_worse_is_explained_by_that_callee(tmp_path):
    # cart (checkout's earlier step) fails from minute 12: checkout stops at that step and never reaches
    # payment and email
    errors = [(dt.datetime(2024, 1, 1, 0, m), "cart", "errors", 8.0 if m >= 12 else 0.0) for m in range(20)]
    job = _job(tmp_path, {"frontend": STEADY, "checkout-1": STEADY, "payment": STOPS, "email": STOPS,
                          "cart": STEADY}, errors)
    assert any(why.startswith("errors up") for _, why, _ in scores(job)["cart"])
    assert _named(job) == []


def test_callees_idle_since_before_the_window_did_not_stop_in_it(tmp_path):
    # a flow that ran in the baseline and was idle from its last minutes on (not the window's doing), and one
    # that starts and stops again inside the window (an intermittent flow, not a stop)
    idle = [10.0] * 6 + [0.0] * 14
    job = _job(tmp_path, {"frontend": STEADY, "checkout-1": STEADY, "payment": idle, "email": idle,
                          "cart": STEADY})
    assert _named(job) == []
    flicker = [10.0] * 10 + [0.0, 12.0, 11.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]
    job = _job(tmp_path / "k", {"frontend": STEADY, "checkout-1": STEADY, "payment": flicker, "email": flicker,
                                "cart": STEADY})
    assert _named(job) == []


def test_a_stop_right_at_the_onset_of_a_job_without_a_baseline(tmp_path):
    # without a baseline, the part of the window before its onset is the baseline: a stop at the onset is a
    # stop that began with the window that is left
    job = _job(tmp_path, {"frontend": STEADY, "checkout-1": STEADY, "payment": STOPS, "email": STOPS,
                          "cart": STEADY})
    assert without_baseline(job) is not None
    assert sorted(_named(job)) == ["checkout", "checkout-1"]


def test_on_a_real_job_a_caller_that_throws_before_it_calls_is_named(job_of):
    # Online Boutique, an exception in the checkout pod from 05:01:13 (metrics only): the checkout service
    # still takes its orders (0.27-0.33 a second) but its payment and e-mail calls, which only it makes, fall
    # to none from 05:02; before, the e-mail service's lower CPU and syscalls (resource use alone) came first
    path = job_of("2022-08-22_05_01")
    job = Job.load(path)
    assert not job.rows["traces"] and not job.rows["logs"]
    first, _, reasons = ranking(job)[0]
    assert first in culprit_of(path)
    assert any(why.startswith(f"its calls to emailservice, paymentservice {STOPPED}") for why in reasons)
