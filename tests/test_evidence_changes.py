"""The evidence ranking's change signals: a change followed by a degradation of the changed entity, harmless
changes, two changed services on one call path, a changed callee whose callers began to fail right after its
change; on made-up jobs and on real defective rollouts."""
from __future__ import annotations

from pathlib import Path

import duckdb
import yaml

from rcagent.explain import solution
from rcagent.job import Job
from rcagent.tools.overview import overview, ranking, scores
from tests.evidence_jobs import culprit_of, write_table
from tests.hostile import META, make_job

ROOT = Path(__file__).resolve().parent.parent


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


def _silent_callee_job(folder: Path, events: list[tuple], failing: bool = True, slow: tuple = (),
                       every: int = 1, silent: tuple = ()) -> Job:
    """frontend calls checkout, which calls currency and catalog; from 00:12 checkout's success rate falls to
    20% (unless not `failing`) and the latency of the services in `slow` grows tenfold, and nothing else moves
    (a new version's pods may report nothing of their own: the services in `silent` report nothing from
    00:11). Every series has a sample a minute, checkout's success rate one every `every` minutes."""
    folder.mkdir(parents=True)
    (folder / "job.yaml").write_text(META.format(id="silent"))
    names = ("frontend", "checkout", "currency", "catalog")
    write_table(folder, "entities", "id VARCHAR, kind VARCHAR, service VARCHAR, node VARCHAR",
                [(n, "service", n, None) for n in names])
    write_table(folder, "relations", "src VARCHAR, dst VARCHAR, kind VARCHAR",
                [("frontend", "checkout", "calls"), ("checkout", "currency", "calls"), ("checkout", "catalog", "calls")])
    rows = []
    for minute in range(20):
        stamp = f"2024-01-01 00:{minute:02d}:00"
        if minute % every == 0:
            rows.append((stamp, "checkout", "success_rate(%)",
                         20.0 if failing and minute >= 12 else 100.0 - 0.5 * (minute % 2)))
        rows += [(stamp, n, "latency_ms", (10 if n in slow and minute >= 12 else 1) * (30.0 + minute % 3))
                 for n in names if not (n in silent and minute >= 11)]
    write_table(folder, "metrics", "timestamp TIMESTAMP, entity VARCHAR, metric VARCHAR, value DOUBLE", rows)
    return Job.load(_with_events(folder, events))


def test_a_changed_callee_whose_callers_fail_right_after_its_change_is_named(tmp_path):
    # catalog rolled out at 00:08 with no harm; currency at 00:11:30, and checkout fails from 00:12
    job = _silent_callee_job(tmp_path / "j", [
        ("2024-01-01 00:08:00", "catalog", "Deployment", "rollout of catalog v2 started"),
        ("2024-01-01 00:11:30", "currency", "Deployment", "rollout of currency v2 started")])
    top = ranking(job)[0]
    assert top[0] == "currency", ranking(job)[:3]
    assert "Deployment at 00:11:30 UTC, then its caller checkout's success_rate(%) worsened from 00:12" in top[2]
    assert not [s for s in scores(job).get("catalog", []) if s[2] == "changes"]
    assert solution("checkout", ["success_rate(%) down 80 sd"]).startswith("Inspect checkout's")   # no change


def test_a_caller_s_own_later_change_explains_its_failures_rather_than_its_callee_s(tmp_path):
    # checkout itself rolled out after currency did: its own change is the nearer one before its failures
    job = _silent_callee_job(tmp_path / "j", [
        ("2024-01-01 00:11:00", "currency", "Deployment", "rollout of currency v2 started"),
        ("2024-01-01 00:11:40", "checkout", "Deployment", "rollout of checkout v2 started")])
    assert not [s for s in scores(job).get("currency", []) if s[2] == "changes"]
    assert ranking(job)[0][0] == "checkout"


def test_a_callee_changed_whole_samples_before_its_caller_failed_is_not_named(tmp_path):
    # catalog rolled out at 00:08; checkout answered well at 00:09, 00:10 and 00:11 and fails from 00:12
    job = _silent_callee_job(tmp_path / "j", [("2024-01-01 00:08:00", "catalog", "Deployment", "rollout")])
    assert not [s for s in scores(job).get("catalog", []) if s[2] == "changes"]
    assert ranking(job)[0][0] == "checkout"


def test_a_sparse_caller_names_a_changed_callee_only_when_its_failure_is_dated_close_to_the_change(tmp_path):
    # checkout's success rate has a sample every 6 minutes (00:06 fine, 00:12 failing): a rollout at 00:07 may
    # or may not precede the failure by minutes, which the other series' 1-minute samples would have shown
    job = _silent_callee_job(tmp_path / "j", [("2024-01-01 00:07:00", "currency", "Deployment", "rollout")],
                             every=6)
    assert not [s for s in scores(job).get("currency", []) if s[2] == "changes"]
    assert ranking(job)[0][0] == "checkout"
    # a rollout half a minute before that failing sample is still named
    job = _silent_callee_job(tmp_path / "k", [("2024-01-01 00:11:30", "currency", "Deployment", "rollout")],
                             every=6)
    assert ranking(job)[0][0] == "currency"


def test_a_caller_s_latency_names_a_changed_callee_only_when_the_callee_s_own_latency_went_unmeasured(tmp_path):
    # currency rolled out at 00:11:30 and checkout got ten times slower from 00:12; currency's own latency,
    # measured every minute after its change, did not move: it did not slow checkout
    events = [("2024-01-01 00:11:30", "currency", "Deployment", "rollout")]
    job = _silent_callee_job(tmp_path / "j", events, failing=False, slow=("checkout",))
    assert not [s for s in scores(job).get("currency", []) if s[2] == "changes"]
    assert ranking(job)[0][0] == "checkout"
    # a currency that reports nothing after its change may have
    job = _silent_callee_job(tmp_path / "k", events, failing=False, slow=("checkout",), silent=("currency",))
    assert ranking(job)[0][0] == "currency"
    # and a caller's failures may come from a callee whose latency held (a wrong answer is fast)
    job = _silent_callee_job(tmp_path / "l", events)
    assert ranking(job)[0][0] == "currency"


def test_a_caller_whose_unchanged_callee_degraded_on_its_own_does_not_name_a_changed_callee(tmp_path):
    # currency rolled out right before checkout failed, but catalog (not changed) got ten times slower then
    job = _silent_callee_job(tmp_path / "j", [("2024-01-01 00:11:30", "currency", "Deployment", "rollout")],
                             slow=("catalog",))
    assert not [s for s in scores(job).get("currency", []) if s[2] == "changes"]
    assert ranking(job)[0][0] != "currency"


def test_a_changed_service_whose_only_degradation_its_callee_explains_gets_no_change_signal(tmp_path):
    # checkout rolled out, then got as slow as its callee catalog (not changed) did: it waits on catalog
    job = _silent_callee_job(tmp_path / "j", [("2024-01-01 00:11:30", "checkout", "Deployment", "rollout")],
                             failing=False, slow=("checkout", "catalog"))
    assert any("(as much as its callee catalog)" in why for _, why, _ in scores(job)["checkout"])
    assert not [s for s in scores(job)["checkout"] if s[2] == "changes"]
    assert ranking(job)[0][0] == "catalog"
    # its own failure after the change does make it the suspect
    job = _silent_callee_job(tmp_path / "k", [("2024-01-01 00:11:30", "checkout", "Deployment", "rollout")],
                             slow=("checkout", "catalog"))
    assert ranking(job)[0][0] == "checkout"


def _after_rollouts(path: Path) -> tuple[float, dict[str, tuple[float, bool]]]:
    """benchmarks/harmless_change.py on one job: PR@1 without a change, and per rolled-out service (PR@1,
    whether it ranked first) after its Deployment a minute before the window."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("harmless_change", ROOT / "benchmarks" / "harmless_change.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    label = yaml.safe_load((path.parent.parent / "labels" / f"{path.name}.yaml").read_text())
    plain, rollouts = bench.measure(path, label, before_s=60)
    return plain, {name: (pr1, first) for name, pr1, first in rollouts}


def test_a_harmless_rollout_before_a_real_incident_leaves_its_culprit_first(job_of):
    # PetSite low_traffic/test/issue_1 (the status updater function's latency): a rollout of a callee of the
    # entry service a minute before the window, after which the entry got slower only eleven minutes later,
    # or of a service that did not degrade, takes nothing from it; a rollout of the entry service itself,
    # whose own p90 latency then rose 6 sd, makes that the suspect
    plain, after = _after_rollouts(job_of("low_traffic/test/issue_1"))
    assert plain == 1.0
    for name in ("AWS::StepFunctions::StateMachine", "STS_AWS::STS", "PetSearch_AWS::ECS::Fargate"):
        assert after[name] == (1.0, False), name
    assert after["PetSite"] == (0.0, True)


def test_a_harmless_rollout_takes_nothing_from_a_callee_degraded_before_the_onset_or_a_sparse_caller(job_of):
    # PetSite low_traffic/train/issue_1: after a rollout of the payment container the entry service got slower
    # six minutes later, but its unchanged callee PetSearch (the root cause) was slow already before the
    # onset found in the window, which explains the entry as well
    plain, after = _after_rollouts(job_of("low_traffic/train/issue_1"))
    assert plain == 1.0 and after["payforadoption_AWS::ECS::Container"] == (1.0, False)
    # high_traffic/test/issue_13: after a rollout of Evidently, its caller (the client-side view of a step
    # function's lambda, a sample every ten minutes) was slow at its next sample, eleven minutes after it
    plain, after = _after_rollouts(job_of("high_traffic/test/issue_13"))
    assert plain == 1.0 and after["Evidently_AWS::Evidently"] == (1.0, False)


def test_a_harmless_rollout_of_a_callee_whose_own_latency_held_takes_nothing_from_its_slow_caller(job_of):
    # PetSite high_traffic/train/issue_7: after a rollout of Systems Manager a minute before the window, its
    # caller PetSearch (the root cause) got slower at its next sample; Systems Manager's own latency, measured
    # every sample since, did not move
    plain, after = _after_rollouts(job_of("high_traffic/train/issue_7"))
    assert plain == 1.0
    assert after["AWSSimpleSystemsManagement_AWS::AWSSimpleSystemsManagement"] == (1.0, False)


def test_on_a_real_rollout_the_callee_whose_change_preceded_its_caller_s_failures_ranks_first(job_of):
    # ChangeRCA 2023-09-22_5: checkout, unchanged, fails from 19:26; of its callees the product catalog and
    # shipping rolled out at 19:23, currency (the defective one) created its first new pod at 19:25:30 and
    # reports nothing of its own
    path = job_of("2023-09-22_5")
    job = Job.load(path)
    top = ranking(job)[0]
    assert top[0] == culprit_of(path)[0] == "currencyservice"
    assert any(why.startswith("Deployment at 19:24:25 UTC (last at 19:25:30), then its caller checkoutservice")
               for why in top[2]), top[2]
    # the runbook step written when the model's text is not a sentence: undo that rollout
    assert solution(top[0], top[2]).startswith("Roll back currencyservice's Deployment of 19:24:25 UTC to its "
                                               "previous version")
