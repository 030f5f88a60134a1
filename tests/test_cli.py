"""The command line: help on every command, one-line errors with exit 2, analyze/show with the scripted backend."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import click
import pytest
from click.testing import CliRunner

from rcagent.cli import cli

RCAGENT = [sys.executable, "-c", "from rcagent.cli import main; main()"]


def commands(group=cli, prefix=()):
    for name, cmd in group.commands.items():
        yield prefix + (name,), cmd
        if isinstance(cmd, click.Group):
            yield from commands(cmd, prefix + (name,))


@pytest.mark.parametrize("path, cmd", list(commands()), ids=lambda x: " ".join(x) if isinstance(x, tuple) else "")
def test_every_command_has_help(path, cmd):
    assert cmd.help and len(cmd.help) > 10
    result = CliRunner().invoke(cli, [*path, "--help"])
    assert result.exit_code == 0 and "Usage" in result.output


def rcagent(*args, env: dict | None = None):
    """`rcagent ARGS` in process (click's CliRunner): the exit code and the two streams a user would see.
    `env` is set in os.environ for the call (a server the command starts inherits it)."""
    r = CliRunner().invoke(cli, [str(a) for a in args], env=env)
    return SimpleNamespace(returncode=r.exit_code, stdout=r.stdout, stderr=r.stderr)


def contacts_script(path: Path) -> Path:
    """A scripted model's run for the contacts case: one look at the logs, then the finalize."""
    path.write_text(json.dumps([
        {"thought": "look", "action": "logs", "arguments": {"entity": "ts-contacts-service"}},
        {"thought": "done", "action": "finalize", "arguments": {
            "root_causes": ["ts-contacts-service"], "root_cause": "The contacts service fails.",
            "solution": "Roll it back.", "evidence": ["errors rose"], "responsibility": "contacts team"}}]))
    return path


def test_missing_job_folder_exits_2_with_one_line(tmp_path):
    r = rcagent("analyze", "--job", str(tmp_path / "nope"), "--store", str(tmp_path / "s.db"))
    assert r.returncode == 2
    assert r.stderr.strip() == f"error: job folder not found: {tmp_path / 'nope'}"


def test_malformed_job_yaml_exits_2(tmp_path):
    (tmp_path / "job.yaml").write_text("id: [oops")
    r = rcagent("analyze", "--job", str(tmp_path), "--store", str(tmp_path / "s.db"))
    assert r.returncode == 2 and "job.yaml: not valid YAML" in r.stderr and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_a_folder_of_jobs_is_one_line_naming_them_and_job_yaml_names_its_folder(job_of, tmp_path):
    jobs = tmp_path / "jobs"
    jobs.mkdir()
    for name in ("b-job", "a-job", "c-job", "d-job"):
        shutil.copytree(job_of("2023-01-29_08_43"), jobs / name)
    r = rcagent("analyze", "--job", jobs, "--store", tmp_path / "s.db")
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1
    assert "holds 4 job folder(s) (a-job, b-job, c-job, ...)" in r.stderr and f"rcagent batch --jobs {jobs}" in r.stderr
    script = contacts_script(tmp_path / "script.json")
    r = rcagent("analyze", "--job", jobs / "a-job" / "job.yaml", "--backend", "scripted", "--script", script,
                "--store", tmp_path / "s.db", "--quiet")
    assert r.returncode == 0, r.stderr


def test_remote_server_is_refused_without_permission(job_of, tmp_path):
    r = rcagent("analyze", "--job", str(job_of("2023-01-29_08_43")), "--backend", "openai",
                "--base-url", "http://10.1.2.3:8000/v1", "--store", str(tmp_path / "s.db"))
    assert r.returncode == 2 and "non-loopback" in r.stderr and "--allow-remote" in r.stderr


def test_analyze_writes_report_and_show_replays(job_of, tmp_path):
    script = tmp_path / "script.json"
    script.write_text(json.dumps([
        {"thought": "look at logs", "action": "logs", "arguments": {"entity": "ts-contacts-service"}},
        {"thought": "look again", "action": "logs", "arguments": {"entity": "ts-contacts-service"}},
        {"thought": "done", "action": "finalize", "arguments": {
            "root_causes": ["ts-contacts-service"], "root_cause": "contacts fails", "solution": "fix it",
            "evidence": ["NEW ERROR line"], "responsibility": "contacts team"}},
    ]))
    out = tmp_path / "d.json"
    db = str(tmp_path / "s.db")
    r = rcagent("analyze", "--job", str(job_of("2023-01-29_08_43")), "--backend", "scripted", "--script",
                str(script), "--store", db, "--out", str(out), "--format", "md")
    assert r.returncode == 0, r.stderr
    assert "step  1/15  logs" in r.stderr and "step  2/15  (invalid)" in r.stderr
    assert "| 1 | ts-contacts-service | service |" in r.stdout
    d = json.loads(out.read_text())
    for key in ("job", "run_id", "root_causes", "root_cause", "solution", "evidence", "responsibility",
                "finalized", "steps", "invalid_steps", "llm_calls", "prompt_tokens", "completion_tokens", "wall_s"):
        assert key in d
    assert (d["root_causes"][0]["entity"], d["root_causes"][0]["kind"]) == ("ts-contacts-service", "service")
    assert d["model_root_causes"] == ["ts-contacts-service"]
    assert d["steps"] == 3 and d["invalid_steps"] == 1
    shown = rcagent("show", d["run_id"][:6], "--store", db)
    assert shown.returncode == 0 and "step 2 INVALID (repeated_call)" in shown.stdout
    assert "No contacts" in shown.stdout
    keys = rcagent("show", d["run_id"], "--snapshots", "--store", db)
    assert "S1  step 0  overview" in keys.stdout
    snap = rcagent("show", d["run_id"], "--snapshot", "S1", "--store", db)
    assert "Entities ranked by anomaly score" in snap.stdout
    assert rcagent("show", "doesnotexist", "--store", db).returncode == 2


def test_analyze_with_samples_reports_candidates_and_show_lists_the_samples(job_of, tmp_path):
    def final(entity, text):
        return {"thought": "done", "action": "finalize", "arguments": {
            "root_causes": [entity], "root_cause": text, "solution": "Roll back the contacts service.",
            "evidence": ["NEW ERROR line"], "responsibility": "contacts team"}}
    script = tmp_path / "script.json"
    script.write_text(json.dumps([
        {"thought": "look at logs", "action": "logs", "arguments": {"entity": "ts-contacts-service"}},
        final("ts-contacts-service", "The contacts service fails to find contacts."),
        final("ts-contacts-service", "Contacts lookups fail in the contacts service."),
        "not an action",
    ]))
    db = str(tmp_path / "s.db")
    r = rcagent("analyze", "--job", str(job_of("2023-01-29_08_43")), "--backend", "scripted", "--script",
                str(script), "--store", db, "--samples", "2", "--aggregate", "embed", "--format", "json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert (d["consistency"]["kept"], d["consistency"]["dropped"]) == (1, {"format": 1})
    assert d["consistency"]["candidates"][0]["root_cause"] == "Contacts lookups fail in the contacts service."
    text = rcagent("analyze", "--job", str(job_of("2023-01-29_08_43")), "--backend", "scripted", "--script",
                   str(script), "--store", str(tmp_path / "again.db"), "--samples", "2", "--quiet")
    assert "Self-consistency: 1 of 2 samples kept (dropped: 1 format)" in text.stdout
    shown = rcagent("show", d["run_id"], "--store", db)
    assert "2 finalizations sampled from step 2's prefix" in shown.stdout
    assert "sample 1: ts-contacts-service" in shown.stdout and "sample 2: dropped (format)" in shown.stdout
    bad = rcagent("analyze", "--job", str(job_of("2023-01-29_08_43")), "--samples", "2", "--aggregate", "vote")
    assert bad.returncode == 2


def test_import_reports_counts(tmp_path):
    from tests.conftest import DATA
    r = rcagent("import", "rcd", str(DATA / "rcd-sockshop.tar.xz"), str(tmp_path / "out"))
    assert r.returncode == 0, r.stderr
    assert "Imported 30 jobs from rcd" in r.stdout and "30 jobs lack: relations, traces, logs, events" in r.stdout
    bad = rcagent("import", "rcd", str(tmp_path / "missing.tar.xz"), str(tmp_path / "out"))
    assert bad.returncode == 2 and "source not found" in bad.stderr


@pytest.mark.model
def test_ctrl_c_keeps_the_run_marked_interrupted(job_of, tmp_path):
    import signal
    import time

    from rcagent.store import Store
    db = tmp_path / "s.db"
    # A shell that runs the suite in the background makes its children ignore SIGINT; restore the default
    # so that the child's Python installs its KeyboardInterrupt handler, as it does in a terminal.
    proc = subprocess.Popen(RCAGENT + ["analyze", "--job", str(job_of("2023-01-29_08_43")), "--store", str(db)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    line = proc.stderr.readline()  # "Loaded ...": the run starts right after
    assert line.startswith("Loaded")
    time.sleep(3)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 130 and "Traceback" not in err
    assert "kept in the store, marked interrupted" in err
    runs = Store(db).runs()
    assert len(runs) == 1 and runs[0]["status"] == "interrupted"


def test_bench_stability_runs_each_configuration_side_by_side(job_of, tmp_path):
    jobs = tmp_path / "jobs"
    jobs.mkdir()
    for case in ("2023-01-29_08_43", "2023-01-29_08_52"):
        (jobs / job_of(case).name).symlink_to(job_of(case))
    logs = {"thought": "logs", "action": "logs", "arguments": {"entity": "ts-contacts-service"}}
    single_quoted = json.dumps(logs).replace('"', "'")
    final = {"thought": "done", "action": "finalize", "arguments": {
        "root_causes": ["ts-contacts-service"], "root_cause": "contacts fails", "solution": "fix it",
        "evidence": ["NEW ERROR No contacts"], "responsibility": "contacts team"}}
    # per job: full (repaired, then finalize), then no-jsonregen (invalid, logs, finalize)
    script = tmp_path / "script.json"
    script.write_text(json.dumps([single_quoted, final, single_quoted, logs, final] * 2))
    out = tmp_path / "stability.json"
    r = rcagent("bench", "stability", "--jobs", str(jobs), "--limit", "2", "--ablate", "jsonregen",
                "--backend", "scripted", "--script", str(script), "--store", str(tmp_path / "b.db"),
                "--out", str(out), "--format", "md")
    assert r.returncode == 0, r.stderr
    full, plain_parse = json.loads(out.read_text())
    assert (full["config"], plain_parse["config"]) == ("full", "no-jsonregen")
    assert full["runs"] == plain_parse["runs"] == 2
    assert full["pass_rate"] == plain_parse["pass_rate"] == 1.0
    assert full["invalid_rate"] == 0.0 and full["repaired_rate"] == 0.5
    assert plain_parse["invalid_rate"] == round(2 / 6, 4) and plain_parse["handled"] == {"format": 2}
    assert "| full | 2 | 100% | 0.0% |" in r.stdout
    assert sorted(full["sample"]) == sorted(p.name for p in jobs.iterdir())


def test_bench_stability_compares_runs_with_and_without_experts(job_of, labels, tmp_path):
    """`--experts --ablate experts`: the same jobs with the expert tools and without, scored by PR@1/RR."""
    root = tmp_path / "import"
    (root / "jobs").mkdir(parents=True)
    (root / "labels").mkdir()
    for case in ("2023-01-29_08_43", "2023-01-29_08_52"):
        job = job_of(case)
        (root / "jobs" / job.name).symlink_to(job)
        (root / "labels" / f"{job.name}.yaml").symlink_to(job.parent.parent / "labels" / f"{job.name}.yaml")
    pod = labels[job_of("2023-01-29_08_43").name]["root_causes"][0]["entity"]

    def final(entity):
        return json.dumps({"thought": "done", "action": "finalize", "arguments": {
            "root_causes": [entity], "root_cause": "contacts fails", "solution": "roll it back",
            "evidence": ["errors rose"], "responsibility": "contacts team"}})
    expert = json.dumps({"thought": "ask", "action": "log_expert", "arguments": {"entity": "ts-contacts-service"}})
    logs = json.dumps({"thought": "read", "action": "logs", "arguments": {"entity": "ts-auth-service"}})
    answer = json.dumps({"findings": [{"evidence": ["L1"], "finding": "errors"}]})
    # per job: full (expert: its thought and answer calls, then finalize on the pod), then no-experts
    script = tmp_path / "script.json"
    script.write_text(json.dumps([expert, "Errors grew.", answer, final(pod), logs, final("ts-auth-service")] * 2))
    config = tmp_path / "rcagent.toml"
    config.write_text('ranking = "model"\n')       # score the scripted answers themselves, not the fused ranking
    out = tmp_path / "stability.json"
    r = rcagent("bench", "stability", "--jobs", str(root), "--limit", "2", "--ablate", "experts", "--experts",
                "--config", str(config), "--backend", "scripted", "--script", str(script),
                "--store", str(tmp_path / "b.db"), "--out", str(out))
    assert r.returncode == 0, r.stderr
    with_experts, without = json.loads(out.read_text())
    assert (with_experts["config"], without["config"]) == ("full", "no-experts")
    assert without["settings"] == {"experts": False}
    assert with_experts["pass_rate"] == without["pass_rate"] == 1.0
    assert [j["llm_calls"] for j in with_experts["per_job"]] == [4, 4]
    assert [j["llm_calls"] for j in without["per_job"]] == [2, 2]
    assert (with_experts["scored"], with_experts["pr1"], with_experts["rr"]) == (2, 1.0, 1.0)
    assert (without["scored"], without["pr1"], without["rr"]) == (2, 0.0, 0.0)
    assert "PR@1" in r.stdout and "no-experts" in r.stdout


def test_bench_stability_rejects_unknown_ablation(tmp_path):
    r = rcagent("bench", "stability", "--jobs", str(tmp_path), "--ablate", "magic")
    assert r.returncode == 2 and r.stderr.strip().startswith("error:")


@pytest.mark.model
def test_analyze_span_mode_with_the_default_model(job_of, tmp_path):
    """`rcagent analyze --mode span` on a real TrainTicket job with SmolLM2: one agent per span, the
    evidence graph's picture beside the store, and `show` lists the agents."""
    db = str(tmp_path / "s.db")
    r = rcagent("analyze", "--job", str(job_of("2023-01-29_08_43")), "--mode", "span", "--store", db,
                "--quiet", "--format", "json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    span = d["span"]
    assert d["mode"] == "span" and d["root_causes"] and span["spans"] >= 2
    assert span["path"][0] == span["graph"]["graph"]["root"] and Path(span["picture"]).parent == tmp_path / "graphs"
    page = Path(span["picture"]).read_text()
    assert page.count("<rect") == span["spans"] and page.count("ABNORMAL</text>") == span["abnormal"]
    shown = rcagent("show", d["run_id"], "--store", db)
    assert shown.returncode == 0 and shown.stdout.count("concludes: root cause") == span["spans"]
