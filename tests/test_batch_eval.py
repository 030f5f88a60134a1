"""Baselines, batch runs (resume, timeout) and the eval command on real jobs; METEOR, embedding and judge."""
from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import pytest

from rcagent.eval.baselines import run_baseline
from rcagent.batch import Batch, prepare_output, read_results
from rcagent.config import Settings
from rcagent.errors import BadInput
from rcagent.job import Job
from tests.test_cli import rcagent
from tests.test_job import write

# SockShop: a CPU hog in service user; OnlineBoutique: a pod of recommendationservice eats CPU
CPU_HOG = "user-cpu/2"


@pytest.fixture(scope="module")
def jobs_dir(imported, tmp_path_factory):
    """Five real jobs, one folder (symlinks), beside the real labels folder."""
    root = tmp_path_factory.mktemp("batch")
    (root / "jobs").mkdir()
    (root / "labels").symlink_to(imported["dest"] / "labels")
    picked = sorted((imported["dest"] / "jobs").iterdir())
    picked = [p for p in picked if p.name.startswith(("ss-", "tt-", "ob-"))][::9][:5]
    for p in picked:
        (root / "jobs" / p.name).symlink_to(p)
    return root


def test_nsigma_ranks_the_cpu_hog_first_on_a_real_job(job_of):
    job = Job.load(job_of(CPU_HOG))
    d = run_baseline(job, "nsigma")
    assert d.root_causes[0].entity == "user" and "cpu" in d.root_cause
    assert [r.score for r in d.root_causes] == sorted((r.score for r in d.root_causes), reverse=True)


def test_signed_scores_rank_a_drop_last_and_abs_ranks_it_first(tmp_path):
    rows = ["timestamp,entity,metric,value"]
    for minute in range(20):
        calls = 100 + minute % 3 if minute < 10 else 2          # requests to 'inventory' collapse
        rows.append(f"2024-01-01T00:{minute:02d}:00Z,inventory,requests,{calls}")
        rows.append(f"2024-01-01T00:{minute:02d}:00Z,cart,cpu,{0.5 + 0.01 * (minute % 2) + (0.05 if minute >= 10 else 0)}")
    job = Job.load(write(tmp_path / "j", metrics="\n".join(rows) + "\n",
                         entities="id,kind\ninventory,service\ncart,service\n"))
    assert [r.entity for r in run_baseline(job, "nsigma").root_causes] == ["cart", "inventory"]
    assert [r.entity for r in run_baseline(job, "nsigma-abs").root_causes] == ["inventory", "cart"]
    assert run_baseline(job, "baro-abs").root_causes[0].entity == "inventory"


def test_random_ranking_is_seeded_per_job(job_of):
    job = Job.load(job_of(CPU_HOG))
    a, b, c = (run_baseline(job, "random", seed) for seed in (0, 0, 1))
    assert [r.entity for r in a.root_causes] == [r.entity for r in b.root_causes]
    assert [r.entity for r in a.root_causes] != [r.entity for r in c.root_causes]
    assert {r.entity for r in a.root_causes} <= set(job.entities)


def test_batch_resume_skips_finished_jobs_and_retries_errors(jobs_dir, tmp_path):
    out = tmp_path / "nsigma.jsonl"
    jobs = sorted((jobs_dir / "jobs").iterdir())
    first = rcagent("batch", "--jobs", str(jobs_dir), "--out", str(out), "--method", "nsigma", "--quiet")
    assert first.returncode == 0, first.stderr
    lines = read_results(out)
    assert sorted(r["job"] for r in lines) == sorted(j.name for j in jobs)
    assert all(r["status"] == "answered" and r["method"] == "nsigma" and r["root_causes"] for r in lines)
    # a crash: the last two jobs lost, one recorded as an error, and a line cut mid-write
    kept = lines[:2] + [{**lines[2], "status": "error", "root_causes": [], "error": "server down"}]
    out.write_text("".join(json.dumps(r) + "\n" for r in kept) + '{"job": "half a li')
    refused = rcagent("batch", "--jobs", str(jobs_dir), "--out", str(out), "--method", "nsigma")
    assert refused.returncode == 2 and "--resume" in refused.stderr
    again = rcagent("batch", "--jobs", str(jobs_dir), "--out", str(out), "--method", "nsigma", "--resume")
    assert again.returncode == 0, again.stderr
    assert f"2 already in {out}, 3 to run" in again.stderr
    final = read_results(out)
    assert sorted(r["job"] for r in final) == sorted(j.name for j in jobs)   # each job exactly once
    assert all(r["status"] == "answered" for r in final)
    assert len(out.read_text().splitlines()) == len(jobs)                   # the broken line is gone



def test_batch_lines_carry_the_job_s_warnings(job_of, tmp_path):
    """A real job whose traces end before the onset found in its window (Online Boutique 2022-08-22 04:36):
    its result line says so, as `rcagent analyze` does on stderr; a job read without a warning has none."""
    import shutil

    folder = tmp_path / "jobs"
    shutil.copytree(job_of("2022-08-22_04_36"), folder / "late")
    shutil.copytree(job_of(CPU_HOG), folder / "plain")
    out = tmp_path / "nsigma.jsonl"
    r = rcagent("batch", "--jobs", folder, "--out", out, "--method", "nsigma", "--quiet")
    assert r.returncode == 0, r.stderr
    lines = {Path(row["job_path"]).name: row for row in read_results(out)}
    assert lines["late"]["warnings"] == Job.load(folder / "late").warnings()
    assert lines["late"]["warnings"][0].startswith("traces: none of its")
    assert lines["plain"]["warnings"] == []


def test_batch_timeout_records_the_job_as_unanswered(jobs_dir, tmp_path):
    step = json.dumps({"thought": "look", "action": "overview", "arguments": {}})
    script = tmp_path / "slow.json"
    script.write_text(json.dumps([step] * 10))
    settings = Settings(backend="scripted", script=str(script), store=str(tmp_path / "s.db"), max_steps=10)
    job = sorted((jobs_dir / "jobs").iterdir())[0]
    out = tmp_path / "react.jsonl"
    prepare_output(out, resume=False)
    from rcagent.serving.scripted import ScriptedBackend
    batch = Batch([job], out, "react", settings, timeout=1, backend=ScriptedBackend([step] * 10, delay=0.6))
    [outcome] = batch.run()
    assert outcome.status == "timeout"
    [line] = read_results(out)
    assert line["status"] == "timeout" and line["root_causes"] == [] and "time limit" in line["error"]
    assert line["model"] == "scripted" and line["wall_s"] >= 1


def test_batch_rejects_an_unknown_method(tmp_path):
    with pytest.raises(BadInput):
        Batch([], tmp_path / "x.jsonl", "magic", Settings())


def test_eval_scores_methods_side_by_side_with_breakdowns_and_plot(jobs_dir, tmp_path):
    for method in ("random", "nsigma"):
        r = rcagent("batch", "--jobs", str(jobs_dir / "jobs"), "--out", str(tmp_path / f"{method}.jsonl"),
                    "--method", method, "--quiet")
        assert r.returncode == 0, r.stderr
    plot = tmp_path / "acc.png"
    r = rcagent("eval", str(tmp_path / "random.jsonl"), str(tmp_path / "nsigma.jsonl"), "--labels",
                str(jobs_dir / "labels"), "--by", "system,level", "--plot", str(plot), "--format", "json")
    assert r.returncode == 0, r.stderr
    result = json.loads(r.stdout)
    assert list(result["methods"]) == ["random", "nsigma"]
    n = len(list((jobs_dir / "jobs").iterdir()))
    for s in result["methods"].values():
        assert s["cases"] == n and 0 <= s["pr1"] <= s["recall@5"] <= s["recall@10"] <= 1
        assert s["pr1"] <= s["rr"] and s["random_pr1"] > 0
    assert result["methods"]["nsigma"]["rr"] > result["methods"]["random"]["rr"]
    assert set(result["by"]["level"]) == {"pod", "service"} and "SockShop" in result["by"]["system"]
    assert plot.read_bytes()[:4] == b"\x89PNG"
    md = rcagent("eval", str(tmp_path / "nsigma.jsonl"), "--labels", str(jobs_dir / "labels"), "--format", "md")
    assert md.returncode == 0 and md.stdout.startswith("## Localization") and "| nsigma | " in md.stdout


def test_eval_refuses_bad_input_with_one_line(tmp_path, jobs_dir):
    r = rcagent("eval", str(tmp_path / "none.jsonl"), "--labels", str(jobs_dir / "labels"))
    assert r.returncode == 2 and "results file not found" in r.stderr
    (tmp_path / "x.jsonl").write_text('{"job": "nope", "root_causes": []}\n')
    r = rcagent("eval", str(tmp_path / "x.jsonl"), "--labels", str(jobs_dir / "labels"), "--by", "colour")
    assert r.returncode == 2 and "--by" in r.stderr
    r = rcagent("eval", str(tmp_path / "x.jsonl"), "--labels", str(jobs_dir / "labels"))
    assert r.returncode == 2 and "no result line has a label" in r.stderr


# ---- text scores and judge ------------------------------------------------------------------------------
def test_meteor_on_known_pairs():
    from rcagent.eval.textmetrics import meteor
    hyp = "the payment service failed because the database connection pool was exhausted"
    ref = "the database connection pool got exhausted so the payment service crashed"
    assert meteor(hyp, ref) == pytest.approx(0.6385, abs=1e-4)      # measured with nltk 3.10 (FACTS.md)
    assert meteor(ref, ref) > 0.99
    assert meteor("", ref) == 0.0
    # WordNet synonyms match: 'tired' shares a synset with 'exhausted', 'full' does not
    ref = "the pool was exhausted"
    assert meteor("the pool was tired", ref) == pytest.approx(0.9922, abs=1e-4)
    assert meteor("the pool was full", ref) == pytest.approx(0.7361, abs=1e-4)


def test_wordnet_lexnames_match_the_debian_manual():
    from rcagent.eval.wordnet import lexnames
    lines = lexnames().splitlines()
    assert len(lines) == 45 and lines[0] == "00\tadj.all\t3" and lines[44] == "44\tadj.ppl\t3"
    man = Path("/usr/share/man/man5/lexnames.5WN.gz")
    if man.is_file():
        names = re.findall(r"^(\d\d)\t(\S+)", gzip.open(man, "rt").read(), re.M)
        assert [f"{n}\t{name}" for n, name in names] == [line.rsplit("\t", 1)[0] for line in lines]


def test_embedding_score_prefers_the_right_diagnosis():
    from rcagent.eval.textmetrics import embedding_scores
    ref = "A CPU hog injected into service user saturated its CPU and slowed its requests."
    right, wrong = embedding_scores(["The user service is slow because its CPU is saturated by a runaway process.",
                                     "The payment database ran out of disk space."], [ref, ref])
    assert right > wrong + 0.2 and embedding_scores([""], [ref]) == [0.0]


def test_text_scores_through_eval(jobs_dir, tmp_path):
    out = tmp_path / "nsigma.jsonl"
    assert rcagent("batch", "--jobs", str(jobs_dir), "--out", str(out), "--method", "nsigma", "--quiet").returncode == 0
    r = rcagent("eval", str(out), "--labels", str(jobs_dir / "labels"), "--text", "--format", "json")
    assert r.returncode == 0, r.stderr
    s = json.loads(r.stdout)["methods"]["nsigma"]
    assert 0 < s["meteor_rc"] < 1 and 0 < s["embed_rc"] < 1
    assert s["meteor_sol"] == 0 and any("BLEURT" in n for n in json.loads(r.stdout)["notes"])
    r = rcagent("eval", str(out), "--labels", str(jobs_dir / "labels"), "--text", "--bleurt", str(tmp_path))
    assert r.returncode == 2 and "not a BLEURT checkpoint" in r.stderr


def test_judge_grades_with_the_scripted_backend_and_skips_unusable_grades(jobs_dir, tmp_path):
    from rcagent.eval.judge import parse_grade
    assert parse_grade('{"reason": "ok", "correctness": 12, "helpfulness": "7"}') == \
        {"correctness": 10, "helpfulness": 7, "reason": "ok"}
    assert parse_grade("I think it is fine") is None
    out = tmp_path / "nsigma.jsonl"
    assert rcagent("batch", "--jobs", str(jobs_dir), "--out", str(out), "--method", "nsigma", "--quiet").returncode == 0
    n = len(read_results(out))
    grades = [{"reason": "right service", "correctness": 8, "helpfulness": 2}] * (n - 1) + ["no idea"]
    script = tmp_path / "judge.json"
    script.write_text(json.dumps(grades))
    r = rcagent("eval", str(out), "--labels", str(jobs_dir / "labels"), "--judge-backend", "scripted",
                "--judge-script", str(script), "--format", "json")
    assert r.returncode == 0, r.stderr
    result = json.loads(r.stdout)
    assert result["methods"]["nsigma"]["judge_correctness"] == 8.0
    assert result["methods"]["nsigma"]["judge_helpfulness"] == 2.0
    assert any(f"no usable grade for 1 of {n}" in note for note in result["notes"])
    assert any(note.startswith("judge separation, nsigma:") for note in result["notes"])


def test_judge_separation_is_the_chance_a_right_answer_is_graded_above_a_wrong_one():
    from rcagent.eval.judge import separation

    def case(pr1, grade):
        return {"pr1": pr1, "judge_correctness": grade}
    perfect = separation([case(1, 9), case(1, 8), case(0, 2), case(0, 3)])
    assert perfect == {"right": 2, "wrong": 2, "right_mean": 8.5, "wrong_mean": 2.5, "auc": 1.0}
    blind = separation([case(1, 5), case(0, 5), case(1, 5), case(0, 5)])
    assert blind["auc"] == 0.5
    inverted = separation([case(1, 1), case(0, 7), {"pr1": 0, "judge_correctness": None}])
    assert inverted["auc"] == 0.0 and inverted["wrong"] == 1
    assert separation([case(1, 5)])["auc"] is None       # no wrong answer: nothing to separate


def test_one_method_in_two_files_stays_apart(jobs_dir, tmp_path):
    from rcagent.eval.evaluate import load_cases
    for name in ("run1", "run2"):
        assert rcagent("batch", "--jobs", str(jobs_dir), "--out", str(tmp_path / f"{name}.jsonl"), "--method",
                       "nsigma", "--quiet").returncode == 0
    cases, _ = load_cases([tmp_path / "run1.jsonl", tmp_path / "run2.jsonl"], jobs_dir / "labels", None)
    assert {c["method"] for c in cases} == {"nsigma [run1]", "nsigma [run2]"}


def test_common_keeps_only_jobs_every_method_has():
    from rcagent.eval.evaluate import common_cases
    cases = [{"method": "a", "job": "j1"}, {"method": "a", "job": "j2"}, {"method": "b", "job": "j2"}]
    assert common_cases(cases) == cases[1:]


@pytest.mark.model
def test_the_local_model_can_act_as_judge(jobs_dir, tmp_path):
    from rcagent.eval.judge import judge_case
    from rcagent.serving import make_backend
    backend = make_backend(Settings(backend="local"))
    case = {"ref_root_cause": "A CPU hog in service user saturated its CPU.", "ref_solution": "Stop the hog.",
            "answer": ["user"], "root_cause": "user is CPU bound", "solution": "kill the process"}
    grade = judge_case(backend, case)      # the grammar makes even a 135M model return a grade
    assert grade is not None and 0 <= grade["correctness"] <= 10 and 0 <= grade["helpfulness"] <= 10


def test_a_cancelled_batch_writes_no_line_for_the_run_in_flight(jobs_dir, tmp_path):
    from rcagent.serving.scripted import ScriptedBackend
    from rcagent.store import Store
    settings = Settings(backend="scripted", store=str(tmp_path / "s.db"))
    out = tmp_path / "react.jsonl"
    job = sorted((jobs_dir / "jobs").iterdir())[0]
    batch = Batch([job], out, "react", settings, backend=ScriptedBackend([]))
    batch.cancel.set()                      # what Ctrl-C in the main thread does
    with pytest.raises(KeyboardInterrupt):
        batch.run()
    assert read_results(out) == []          # --resume will run it again
    [run] = Store(settings.store_path()).runs()
    assert run["status"] == "interrupted"
