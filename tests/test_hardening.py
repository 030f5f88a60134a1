"""Hardening beyond the hostile corpus: signals, abandoned runs, transient server errors, OpenMP waiting,
and SQL-injection names on a real job."""
from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import duckdb
import pytest

from rcagent.errors import BackendError
from rcagent.serving import llama_environment
from rcagent.serving.openai import OpenAIBackend
from rcagent.store import Store
from tests.hostile import HOSTILE_NAMES, leaks, files_under, run_cli

RCAGENT = [sys.executable, "-c", "from rcagent.cli import main; main()"]


# ---- runs left 'running' by a process that is gone ---------------------------------------------------
def test_a_run_of_a_dead_process_is_marked_interrupted_when_the_store_is_next_opened(tmp_path):
    store = Store(tmp_path / "s.db")
    dead = subprocess.Popen(["true"])
    dead.wait()
    gone = store.start_run("a", "/a", "scripted", "m", {})
    mine = store.start_run("b", "/b", "scripted", "m", {})
    store.db["runs"].update(gone, {"pid": dead.pid})
    assert store.get_run(gone)["status"] == "running"
    Store(tmp_path / "s.db")                          # the next writer
    assert store.get_run(gone)["status"] == "interrupted" and store.get_run(gone)["ended"]
    assert store.get_run(mine)["status"] == "running"     # this process is alive: its run is left alone


def test_reading_a_store_never_creates_one(tmp_path):
    from rcagent.errors import BadInput

    with pytest.raises(BadInput, match="no store there"):
        Store(tmp_path / "a" / "b" / "s.db", create=False)
    assert not (tmp_path / "a").exists()


# ---- transient errors and odd answers of an OpenAI-compatible server ---------------------------------
ANSWER = {"choices": [{"message": {"content": '{"ok": 1}'}}], "usage": {"prompt_tokens": 3, "completion_tokens": 2}}


@contextlib.contextmanager
def serving(statuses: list[int], retries: int, answer: list | None = None):
    """A loopback HTTP server answering POSTs with the given statuses in turn (then 200 with answer[0], ANSWER
    by default; a test may swap it between requests), and a backend pointed at it: yields (backend, the
    statuses sent so far)."""
    seen, answer = [], answer or [ANSWER]

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            status = statuses[len(seen)] if len(seen) < len(statuses) else 200
            seen.append(status)
            body = json.dumps(answer[0] if status == 200 else {"error": "busy"}).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield OpenAIBackend(f"http://127.0.0.1:{server.server_port}/v1", "m", retries=retries, backoff=0.01), seen
    finally:
        server.shutdown()


HI = [{"role": "user", "content": "hi"}]


def test_429_and_5xx_are_retried_with_backoff_then_answered():
    with serving([503, 429, 502], retries=4) as (backend, seen):
        [c] = backend.complete(HI)
        assert c.text == '{"ok": 1}' and seen == [503, 429, 502, 200]


def test_a_server_that_keeps_failing_is_reported_after_the_retries():
    with serving([500] * 10, retries=2) as (backend, seen):
        with pytest.raises(BackendError, match="HTTP 500.*after 3 attempts"):
            backend.complete(HI)
        assert len(seen) == 3


def test_a_4xx_is_not_retried():
    with serving([404] * 10, retries=3) as (backend, seen):
        with pytest.raises(BackendError, match="HTTP 404"):
            backend.complete(HI)
        assert len(seen) == 1


def test_connection_refused_is_retried_then_reported():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]           # closed again: nothing listens there
    backend = OpenAIBackend(f"http://127.0.0.1:{port}/v1", "m", retries=2, backoff=0.01)
    with pytest.raises(BackendError, match="cannot reach.*after 3 attempts"):
        backend.complete(HI)


# A chat completion as vLLM and llama.cpp's server write it: every field the property test below may spoil.
FULL_ANSWER = {"id": "chatcmpl-1", "object": "chat.completion", "created": 1714557600, "model": "m",
               "choices": [{"index": 0, "finish_reason": "stop",
                            "message": {"role": "assistant", "content": '{"thought": "t", "action": "finalize"}'}}],
               "usage": {"prompt_tokens": 812, "completion_tokens": 24, "total_tokens": 836}}


def test_a_server_answer_with_a_field_of_another_type_is_read_or_refused_in_one_line():
    """Any field of a chat completion replaced by a value of another type or form (or removed), a few at a
    time (hypothesis): the backend returns texts, and token counts that are counts, or refuses the answer
    with one line; never another exception (a run would end in "internal error", a token count that is no
    count broke the run's totals and its record in the store)."""
    import copy
    from collections import Counter

    from hypothesis import HealthCheck, given, settings, strategies as st

    from tests.hostile import DELETE, ODD_VALUES, field_paths, set_field

    outcomes, answer = Counter(), [FULL_ANSWER]
    with serving([], retries=0, answer=answer) as (backend, _):
        @settings(max_examples=200, deadline=None, database=None, derandomize=True,
                  suppress_health_check=list(HealthCheck))
        @given(st.data())
        def read_or_refused(data):
            doc = copy.deepcopy(FULL_ANSWER)
            for _ in range(data.draw(st.integers(1, 3))):
                path = data.draw(st.sampled_from(list(field_paths(doc))))
                value = data.draw(st.sampled_from([DELETE, *ODD_VALUES]))
                if path:
                    set_field(doc, path, value)
                elif value is not DELETE:
                    doc = copy.deepcopy(value)
            answer[0] = doc
            try:
                completions = backend.complete(HI, n=data.draw(st.integers(1, 2)))
            except BackendError as exc:
                assert "unexpected answer" in str(exc) or "no choices" in str(exc), exc
                outcomes["refused"] += 1
                return
            for c in completions:
                assert isinstance(c.text, str)
                assert all(type(n) is int and 0 <= n < 2**31 for n in (c.prompt_tokens, c.completion_tokens)), c
            outcomes["read"] += 1

        read_or_refused()
    assert outcomes["read"] > 40 and outcomes["refused"] > 40, outcomes   # both paths were exercised


def test_an_answer_that_is_no_chat_completion_ends_analyze_with_one_line(job_of, tmp_path):
    from tests.conftest import CONTACTS_CASE

    spoiled = json.loads(json.dumps(FULL_ANSWER))
    spoiled["choices"][0]["message"]["content"] = 7      # a number where the text belongs
    with serving([], retries=0, answer=[spoiled]) as (backend, _):
        r = run_cli(["analyze", "--job", job_of(CONTACTS_CASE), "--backend", "openai", "--base-url", backend.base_url,
                     "--model", "m", "--store", tmp_path / "s.db", "--quiet"], tmp_path)
    assert r.code == 1 and r.one_line and "model backend error" in r.err and "unexpected answer" in r.err, r.err


# ---- OpenMP waiting ----------------------------------------------------------------------------------
def test_passive_waiting_is_the_default_unless_the_user_chose():
    assert llama_environment({})["OMP_WAIT_POLICY"] == "PASSIVE"
    assert llama_environment({"OMP_WAIT_POLICY": "ACTIVE"})["OMP_WAIT_POLICY"] == "ACTIVE"


def test_a_stop_as_the_server_s_address_is_printed_is_a_clean_stop(tmp_path, monkeypatch):
    # SIGTERM arrives (raised as KeyboardInterrupt) the moment a client has read the address: the engine is
    # stopped and serve exits 0, as for any later stop. It once arrived between the print and the wait and
    # exited 130 (seen in a CI run of the real server below, under load).
    import click

    from rcagent.serving import server

    events = []

    class Engine:
        returncode = None

        def wait(self, timeout=None):
            events.append("waited")
            return 0

        def terminate(self):
            events.append("terminated")

    monkeypatch.setattr(server, "start", lambda *a, **k: (Engine(), "http://127.0.0.1:9"))
    echo = click.echo

    def echo_then_stop(message=None, *args, **kwargs):
        echo(message, *args, **kwargs)
        if message == "http://127.0.0.1:9":
            raise KeyboardInterrupt

    monkeypatch.setattr(click, "echo", echo_then_stop)
    r = run_cli(["serve", "--model", "smollm2", "--port", "9", "--log", tmp_path / "serve.log"], tmp_path)
    assert (r.code, events) == (0, ["terminated", "waited"]), r.err
    assert "server stopped" in r.err


@pytest.mark.server
def test_a_served_engine_waits_passively_and_stops_on_sigterm(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(RCAGENT + ["serve", "--model", "smollm2", "--port", str(port), "--log",
                                       str(tmp_path / "serve.log")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert proc.stdout.readline().startswith("http://127.0.0.1:")
        children = [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit()
                    and _ppid(p) == proc.pid]
        assert children, "the engine process was not found"
        environ = (Path("/proc") / str(children[0]) / "environ").read_bytes().split(b"\0")
        assert b"OMP_WAIT_POLICY=PASSIVE" in environ
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
        assert "server stopped" in proc.stderr.read()
        assert not any(Path("/proc", str(c)).exists() and _state(c) != "Z" for c in children)
    finally:
        if proc.poll() is None:
            proc.kill()


def _ppid(proc_dir: Path) -> int:
    try:
        return int((proc_dir / "stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return -1


def _state(pid: int) -> str:
    try:
        return (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "Z"


# ---- SIGTERM during a batch with the real model --------------------------------------------------------
@pytest.mark.model
def test_sigterm_during_a_batch_keeps_complete_lines_and_resume_finishes(imported, tmp_path):
    jobs = tmp_path / "jobs"
    jobs.mkdir()
    picked = sorted(p for p in (imported["dest"] / "jobs").iterdir() if p.name.startswith("tt-"))[:3]
    for p in picked:
        (jobs / p.name).symlink_to(p)
    out, db = tmp_path / "r.jsonl", tmp_path / "s.db"
    args = RCAGENT + ["batch", "--jobs", str(jobs), "--out", str(out), "--store", str(db), "--max-steps", "4",
                      "--quiet"]
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline and not (out.is_file() and out.read_text().count("\n") >= 1):
        time.sleep(0.5)
    time.sleep(2)                                 # the second job is in flight
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130 and "Traceback" not in err and "--resume" in err
    lines = [json.loads(line) for line in out.read_text().splitlines()]   # every line is complete
    assert 1 <= len(lines) < 3
    runs = {r["status"] for r in Store(db, create=False).runs()}
    assert "interrupted" in runs and "running" not in runs
    r = subprocess.run(args + ["--resume"], capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr
    final = [json.loads(line)["job"] for line in out.read_text().splitlines()]
    assert sorted(final) == sorted(p.name for p in picked)          # none lost, none twice


def test_a_second_batch_on_the_same_file_is_refused_while_the_first_runs(imported, tmp_path):
    jobs = tmp_path / "jobs"
    jobs.mkdir()
    for p in sorted((imported["dest"] / "jobs").iterdir())[:2]:
        (jobs / p.name).symlink_to(p)
    out = tmp_path / "r.jsonl"
    script = tmp_path / "slow.py"
    # the first batch holds the lock while it sleeps inside its first job (a slow model, in effect)
    script.write_text(
        "import time, rcagent.batch as b\n"
        "orig = b.Batch.one\n"
        "def slow(self, job):\n    time.sleep(5)\n    return orig(self, job)\n"
        "b.Batch.one = slow\n"
        "from rcagent.cli import main\nmain()\n")
    first = subprocess.Popen([sys.executable, str(script), "batch", "--jobs", str(jobs), "--out", str(out),
                              "--method", "nsigma", "--quiet"], stderr=subprocess.PIPE, text=True)
    time.sleep(2.5)
    second = subprocess.run(RCAGENT + ["batch", "--jobs", str(jobs), "--out", str(out), "--method", "nsigma",
                                       "--resume", "--quiet"], capture_output=True, text=True, timeout=120)
    assert second.returncode == 2 and "another batch is writing" in second.stderr
    assert first.wait(timeout=120) == 0
    assert len(out.read_text().splitlines()) == 2               # each job once


# ---- SQL-injection names on a real job ----------------------------------------------------------------
def test_injection_names_are_inert_on_a_real_job(job_of, tmp_path):
    """A real TrainTicket job whose contacts pod is renamed to an injection string in every table: every
    tool and the overview run on it, nothing is read or written outside, and the name comes back as data."""
    src = job_of("2023-01-29_08_43")
    hostile = HOSTILE_NAMES[0]
    job = tmp_path / "job"
    job.mkdir()
    shutil.copy(src / "job.yaml", job / "job.yaml")
    con = duckdb.connect()
    pod = con.execute(f"SELECT id FROM read_parquet(?) WHERE kind = 'pod' AND id LIKE 'ts-contacts-service%'",
                      [str(src / "entities.parquet")]).fetchall()[0][0]
    for table in ("entities", "metrics", "traces", "logs", "relations"):
        rel = con.read_parquet(str(src / f"{table}.parquet"))
        cols = rel.columns
        swap = ", ".join(f"CASE WHEN \"{c}\" = $pod THEN $hostile ELSE \"{c}\" END AS \"{c}\""
                         if dict(zip(rel.columns, rel.types))[c] == "VARCHAR" else f'"{c}"' for c in cols)
        rel.create_view("src", replace=True)
        con.execute(f"CREATE OR REPLACE TABLE out AS SELECT {swap} FROM src", {"pod": pod, "hostile": hostile})
        con.table("out").write_parquet(str(job / f"{table}.parquet"))
    con.close()
    actions = [{"thought": "t", "action": t, "arguments": {"entity": hostile}}
               for t in ("metrics", "logs", "calls", "topology")] + [
        {"thought": "t", "action": "finalize", "arguments": {
            "root_causes": [hostile], "root_cause": "The contacts pod returned errors to its callers.",
            "solution": "Roll back the contacts service.", "evidence": ["error logs rose in the window"],
            "responsibility": "the contacts team"}}]
    (tmp_path / "script.json").write_text(json.dumps(actions))
    (tmp_path / "ok").mkdir()
    before = files_under(tmp_path)
    r = run_cli(["analyze", "--job", job, "--backend", "scripted", "--script", tmp_path / "script.json",
                 "--store", tmp_path / "ok" / "s.db", "--out", tmp_path / "ok" / "d.json", "--quiet"], tmp_path)
    assert r.code == 0, r.err
    assert not leaks(tmp_path, before, [tmp_path / "ok"])
    diagnosis = json.loads((tmp_path / "ok" / "d.json").read_text())
    assert hostile in [rc["entity"] for rc in diagnosis["root_causes"]]
    steps = sqlite3.connect(tmp_path / "ok" / "s.db").execute(
        "SELECT action, valid, observation FROM steps ORDER BY step").fetchall()
    # (the overview ran on it too: it is in the task, before the first step)
    assert [valid for _, valid, _ in steps] == [1, 1, 1, 1, 1], steps
    metrics_obs = steps[0][2]
    assert metrics_obs.startswith(f"Metrics of {hostile} (pod") and "window mean" in metrics_obs
