"""`rcagent bench ranking`: leave-one-system-out choice of the ranking's parameters (and of the model's vote in
benchmarks/fusion_replay.py), on rows made here and on real jobs of three systems."""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from rcagent.eval.rankbench import BASELINES, GRID, changed, leave_one_out, sign_test, table, wilson
from rcagent.tools.overview import DEFAULT
from tests.hostile import run_cli

ROOT = Path(__file__).resolve().parent.parent


def _script(name: str):
    """A benchmark script of benchmarks/ as a module."""
    import importlib.util
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _row(group, good, good_without_baseline=frozenset()):
    """A job of `group` on which only the parameters in `good` find the root cause (with no baseline, only
    those in `good_without_baseline`)."""
    return {"job": f"{group}-{id(good)}", "group": group,
            "full": {p: ((1.0, 1.0) if p in good else (0.0, 0.2)) for p in GRID},
            "no_baseline": {p: ((1.0, 1.0) if p in good_without_baseline else (0.0, 0.0)) for p in GRID},
            **{m: (0.0, 0.1) for m in BASELINES}}


def test_parameters_are_chosen_on_the_other_groups_only():
    a, b = GRID[0], GRID[-1]
    rows = [_row("A", {a}) for _ in range(3)] + [_row("B", {b}) for _ in range(3)] + [_row("C", {b})]
    results = {r["group"]: r for r in leave_one_out(rows)}
    # held out A: chosen on B and C, which prefer b, so A scores 0 although a would have found all of A
    assert results["A"]["params"] == dataclasses.asdict(b)
    assert results["A"]["overview_pr1"] == 0.0
    # held out B: chosen on A (a) and C (b), one vote each: a tie in PR@1 and RR, the earlier setting a; B scores 0
    assert results["B"]["params"] == dataclasses.asdict(a)
    assert results["B"]["overview_pr1"] == 0.0
    # held out C: chosen on A and B (a tie, 3 jobs each): the earlier grid setting, a; C scores 0
    assert results["C"]["overview_pr1"] == 0.0
    assert results["all"]["cases"] == 7


def test_each_other_group_is_one_vote_whatever_its_number_of_jobs():
    a, b = GRID[0], GRID[-1]
    rows = [_row("A", {a}) for _ in range(5)] + [_row("B", {b}), _row("C", {b}), _row("D", {b})]
    results = {r["group"]: r for r in leave_one_out(rows)}
    # held out D: a finds 5 of the 7 other jobs, b 2 of them; but b finds the culprit on two of the three
    # other systems: b is chosen, and D scores 1
    assert results["D"]["params"] == dataclasses.asdict(b)
    assert results["D"]["overview_pr1"] == 1.0


def test_the_no_baseline_variant_gets_its_own_choice_made_on_the_other_groups():
    a, b = GRID[0], GRID[-1]
    rows = [_row(g, {a}, {b}) for g in "AB" for _ in range(2)]
    results = {r["group"]: r for r in leave_one_out(rows)}
    assert results["A"]["params"] == dataclasses.asdict(a)
    assert results["A"]["params_no_baseline"] == dataclasses.asdict(b)
    assert results["A"]["no_baseline_pr1"] == 1.0 and results["A"]["no_baseline_same_pr1"] == 0.0
    # a setting that only the held-out group's own no-baseline jobs favour is never chosen for it
    rows = [_row("A", {a}, {a}), _row("B", {a}, {b}), _row("C", {a}, {b})]
    assert {r["group"]: r for r in leave_one_out(rows)}["A"]["no_baseline_pr1"] == 0.0


def test_a_tie_in_pr1_goes_to_the_better_rr_on_the_other_groups():
    a, b = GRID[0], GRID[-1]

    def row(group, rr_of_b):
        r = _row(group, {a, b})
        r["full"][b] = (1.0, rr_of_b)
        return r
    rows = [row("A", 0.5), row("B", 1.0), row("C", 1.0), _row("D", {a, b})]
    # both find every root cause of B, C and D; a ranks them no better, but on A (held out) b's RR is worse
    results = {r["group"]: r for r in leave_one_out(rows)}
    assert results["A"]["params"] == dataclasses.asdict(a)      # on B, C, D: a tie in PR@1 and in RR
    for r in rows:
        r["full"][a] = (1.0, 0.9)
    results = {r["group"]: r for r in leave_one_out(rows)}
    assert results["A"]["params"] == dataclasses.asdict(b)      # b's RR is better on B, C and D
    assert results["D"]["params"] == dataclasses.asdict(a)      # with A among the others: 0.9 x 3 > 2.5


def test_a_tie_goes_to_the_defaults():
    rows = [_row("A", set(GRID)), _row("B", set(GRID))]
    assert all(r["params"] is None or r["params"]["z_min"] == DEFAULT.z_min for r in leave_one_out(rows))


def test_a_tie_goes_to_the_setting_nearest_the_defaults_not_the_grid_s_first():
    # two settings the other groups cannot tell apart: both change z_min, the later one nothing else
    near = dataclasses.replace(DEFAULT, z_min=2.0)
    far = dataclasses.replace(near, line_fell=0.0)
    assert GRID.index(far) < GRID.index(near) and changed(near) == 1 and changed(far) == 2
    rows = [_row(g, {near, far}) for g in "ABC"]
    assert all(r["params"] == dataclasses.asdict(near) for r in leave_one_out(rows)[:3])


def test_the_wilson_interval_matches_its_formula_and_stays_within_0_and_1():
    low, high = wilson(21, 28)   # 75.0%: by hand, centre 0.7198, half-width 0.1534
    assert (round(low, 3), round(high, 3)) == (0.566, 0.873)
    assert wilson(0, 10)[0] == 0.0 < wilson(0, 10)[1] and wilson(10, 10)[0] < wilson(10, 10)[1] == 1.0
    assert wilson(0, 0) is None


def test_each_held_out_pr1_is_reported_with_its_interval():
    rows = [_row("A", set(GRID)) for _ in range(4)] + [_row("B", set()) for _ in range(4)]
    results = {r["group"]: r for r in leave_one_out(rows)}
    assert results["A"]["overview_pr1_95"] == wilson(4, 4) and results["B"]["overview_pr1_95"] == wilson(0, 4)
    assert results["all"]["overview_pr1_95"] == wilson(4, 8)
    assert "| A | 4 | 100.0 | 51.0–100.0 |" in table(list(results.values()))


def test_full_and_no_baseline_are_compared_pair_by_pair():
    assert sign_test(13, 2) == sign_test(2, 13) == 242 / 32768 and sign_test(0, 0) == 1.0 and sign_test(1, 0) == 1.0
    # A: 3 jobs found only with the baseline, 1 only without it, 1 both ways
    rows = ([_row("A", set(GRID)) for _ in range(3)] + [_row("A", set(), set(GRID)), _row("A", set(GRID), set(GRID))]
            + [_row("B", set(GRID), set(GRID))])
    a = {r["group"]: r for r in leave_one_out(rows)}["A"]
    assert (a["only_full"], a["only_no_baseline"], a["paired_p"]) == (3, 1, 0.625)
    assert "| 3 / 1 (p 0.62) |" in table([a])


def test_bench_ranking_on_real_jobs_of_three_systems(imported, tmp_path):
    root = tmp_path / "sample"
    (root / "jobs").mkdir(parents=True)
    (root / "labels").symlink_to(imported["dest"] / "labels")
    jobs = sorted((imported["dest"] / "jobs").iterdir())
    for prefix in ("tt-", "ss-", "cr-"):
        for p in [j for j in jobs if j.name.startswith(prefix)][:3]:
            (root / "jobs" / p.name).symlink_to(p)
    (tmp_path / "ok").mkdir()
    r = run_cli(["bench", "ranking", "--jobs", root, "--quiet", "--out", tmp_path / "ok" / "r.json"], tmp_path)
    assert r.code == 0, r.err
    results = json.loads((tmp_path / "ok" / "r.json").read_text())
    assert [x["group"] for x in results] == ["OnlineBoutique", "SockShop", "TrainTicket", "all"]
    assert all(x["cases"] == 3 for x in results[:3]) and results[-1]["cases"] == 9
    assert "| SockShop | 3 |" in r.out


def test_the_model_s_vote_is_chosen_on_the_other_systems_runs():
    replay = _script("fusion_replay")
    helps = dict.fromkeys(replay.VOTES, 0.0) | {0.5: 1.0, 1.0: 1.0}    # the model's pick is right
    hurts = dict.fromkeys(replay.VOTES, 1.0) | {0.5: 0.0, 1.0: 0.0}    # the ranking alone is right
    scored = [("a1", helps), ("a2", helps), ("b1", hurts), ("c1", helps)]
    rows = {r[0]: r for r in replay.leave_one_out(scored, {"a1": "A", "a2": "A", "b1": "B", "c1": "C"})}
    # held out A: on B and C the vote ties (1 of 2 either way): the smaller vote, 0, and A scores 0
    assert rows["A"][2] == 0.0 and rows["A"][3] == 0.0 and rows["A"][5] == 1.0
    # held out B: A and C favour a vote of 0.5 (the smaller of the two that win): B scores 0
    assert rows["B"][2] == 0.5 and rows["B"][3] == 0.0 and rows["B"][4] == 1.0
    # held out C: A (two runs) favours 0.5, B favours 0, one vote each: a tie, the smaller vote; C scores 0
    assert rows["C"][2] == 0.0 and rows["C"][3] == 0.0
    assert rows["all"][1] == 4 and rows["all"][3] == 0.0


def test_the_onset_oracle_splits_a_real_job_at_its_injection_time(job_of, capsys, monkeypatch):
    # benchmarks/onset_oracle.py on one TrainTicket case: the no-baseline variant three ways beside the full job
    import sys
    oracle = _script("onset_oracle")
    root = job_of("2023-01-29_09_42").parent.parent
    monkeypatch.setattr(sys, "argv", ["onset_oracle.py", "--jobs", str(root)])
    oracle.main()
    row = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| TrainTicket |")]
    assert len(row) == 1 and row[0].count("(1)") == len(oracle.VARIANTS), row


def test_the_resolution_benchmark_halves_every_series_and_keeps_whole_traces(tmp_path):
    from rcagent.job import Job
    from tests.hostile import make_job

    resolution = _script("resolution")
    job = Job.load(make_job(tmp_path / "j"))
    samples = dict(job.query("SELECT entity || metric, count(*) FROM metrics GROUP BY 1"))
    assert resolution.thin(job, "metrics every 2nd sample")
    assert dict(job.query("SELECT entity || metric, count(*) FROM metrics GROUP BY 1")) == \
        {series: n // 2 for series, n in samples.items()}
    job = Job.load(make_job(tmp_path / "k"))
    assert resolution.thin(job, "traces 1 in 4")
    kept = job.query("SELECT trace_id, count(*) FROM traces GROUP BY 1")
    assert 0 < len(kept) < 40 and all(n == 2 for _, n in kept)     # both spans of every trace kept
    assert job.rows["traces"] == 2 * len(kept) and "overview_rows" not in job.cache
    # the four samples a job is scored by are its traces' four disjoint quarters: each trace in exactly one
    everything = Job.load(make_job(tmp_path / "k")).query("SELECT DISTINCT trace_id FROM traces")
    quarters = []
    for part in range(resolution.SAMPLES["traces 1 in 4"]):
        job = Job.load(make_job(tmp_path / "k"))
        assert resolution.thin(job, "traces 1 in 4", part)
        quarters.append({t for t, in job.query("SELECT DISTINCT trace_id FROM traces")})
    assert sum(map(len, quarters)) == len(everything) == len(set().union(*quarters)) and all(quarters)


def test_the_resolution_benchmark_empties_traces_and_logs_as_a_job_without_their_files(tmp_path):
    from rcagent.job import Job
    from rcagent.tools.overview import ranking
    from tests.hostile import make_job

    resolution = _script("resolution")
    job = Job.load(make_job(tmp_path / "j"))
    metrics = job.rows["metrics"]
    assert job.rows["traces"] and job.rows["logs"]
    assert resolution.thin(job, "metrics only")
    assert job.query("SELECT count(*) FROM traces")[0][0] == job.query("SELECT count(*) FROM logs")[0][0] == 0
    assert (job.rows["traces"], job.rows["logs"], job.rows["metrics"]) == (0, 0, metrics)
    (tmp_path / "j" / "traces.parquet").unlink()
    (tmp_path / "j" / "logs.parquet").unlink()
    assert ranking(job) == ranking(Job.load(tmp_path / "j"))      # ranked as the job without those files
    assert not resolution.thin(job, "no traces")                  # nothing left to empty


def test_the_window_benchmark_keeps_baseline_periods_outside_the_moved_window(tmp_path):
    from rcagent.job import Job
    from tests.hostile import make_job

    window_shift = _script("window_shift")
    job = Job.load(make_job(tmp_path / "j"))
    start, end = job.window.start, job.window.end
    window_shift.move_window(job, "starts earlier", 0.25)
    assert job.window.start == start - (end - start) / 4 and job.window.end == end
    baseline_start = job.baseline[0].start
    assert [(p.start, p.end) for p in job.baseline] == [(baseline_start, job.window.start)]   # cut where it overlapped


def test_the_overlap_benchmark_ranks_as_a_job_whose_yaml_runs_its_baseline_through_the_window(tmp_path):
    import yaml

    from rcagent.job import Job
    from rcagent.tools.overview import ranking
    from tests.hostile import make_job

    overlap = _script("baseline_overlap")
    folder = make_job(tmp_path / "j")
    job = Job.load(folder)
    w = job.window
    assert overlap.through_window(job, cut=False)
    [span] = job.baseline
    assert span.start < w.start and span.end >= w.end          # read as given: the window inside
    meta = yaml.safe_load((folder / "job.yaml").read_text())
    meta["baseline"] = [{"start": f"{span.start:%Y-%m-%dT%H:%M:%S}Z", "end": f"{span.end:%Y-%m-%dT%H:%M:%S}Z"}]
    (folder / "job.yaml").write_text(yaml.safe_dump(meta))
    job, written = Job.load(folder), Job.load(folder)
    assert overlap.through_window(job, cut=True)
    assert job.baseline == written.baseline and ranking(job) == ranking(written)   # cut as Job.load cuts it
    assert all(p.end <= w.start or p.start >= w.end for p in job.baseline)


def test_jobs_without_labels_beside_them_are_one_line_saying_where_labels_were_looked_for(tmp_path):
    from tests.hostile import make_job

    make_job(tmp_path / "mine" / "incident-1")
    r = run_cli(["bench", "ranking", "--jobs", tmp_path / "mine"], tmp_path / "sandbox")
    assert r.code == 2 and r.one_line and len(r.err.strip().splitlines()) == 1
    assert f"no labels beside these jobs (looked for {tmp_path / 'labels'})" in r.err and "--labels" in r.err
