"""`rcagent batch --engine ray` on a real Ray cluster on this machine: a head started with `ray start` and
two worker CPUs; every shared job with a baseline gives the local batch's lines; a worker killed mid-batch
loses and duplicates nothing; the scripted model's runs land in the store. Skipped without Ray."""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.test_cli import rcagent

ray = pytest.importorskip("ray", reason="Ray is not installed (the extra `ray`)")
pytestmark = pytest.mark.cluster
RAY = Path(sys.executable).with_name("ray")
RCAGENT = [sys.executable, "-c", "from rcagent.cli import main; main()"]
# a test cluster on one machine: Ray's token authentication off, for the head and for the batch joining it
ENV = {**os.environ, "RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0"}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def cluster():
    port = _free_port()
    started = subprocess.run([str(RAY), "start", "--head", "--node-ip-address", "127.0.0.1", "--port", str(port),
                              "--num-cpus", "2", "--include-dashboard", "false", "--disable-usage-stats"],
                             env=ENV, capture_output=True, text=True, timeout=180)
    assert started.returncode == 0, started.stderr[-2000:]
    yield f"127.0.0.1:{port}"
    subprocess.run([str(RAY), "stop", "--force"], env=ENV, capture_output=True, timeout=120)


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _answers(lines: list[dict]) -> dict[str, tuple]:
    return {r["job"]: (r["status"], tuple(c["entity"] for c in r["root_causes"])) for r in lines}


def _busy_workers() -> list[int]:
    """The worker processes running a job now (Ray names them after the task)."""
    out = subprocess.run(["ps", "-eo", "pid,args"], capture_output=True, text=True).stdout
    return [int(line.split()[0]) for line in out.splitlines() if "ray::run_task" in line]


def test_every_shared_job_with_a_baseline_gives_the_local_lines_and_survives_a_killed_worker(
        cluster, imported, tmp_path):
    jobs = imported["dest"] / "jobs"
    local = tmp_path / "local.jsonl"
    assert rcagent("batch", "--jobs", jobs, "--out", local, "--method", "nsigma", "--quiet").returncode == 0
    on_ray = tmp_path / "ray.jsonl"
    proc = subprocess.Popen([*RCAGENT, "batch", "--jobs", str(jobs), "--out", str(on_ray), "--method", "nsigma",
                             "--engine", "ray", "--address", cluster, "--quiet"],
                            env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    killed = None
    deadline = time.monotonic() + 300
    while proc.poll() is None and time.monotonic() < deadline:   # kill a worker once 20 lines are written
        written = len(on_ray.read_text().splitlines()) if on_ray.exists() else 0
        busy = _busy_workers()
        if killed is None and written >= 20 and busy:
            os.kill(busy[0], signal.SIGKILL)
            killed = (busy[0], written)
        time.sleep(0.05)
    stdout, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 0, stderr[-2000:]
    assert killed is not None, "no worker was running to kill"
    lines = _lines(on_ray)
    jobs_seen = [r["job"] for r in lines]
    assert len(jobs_seen) == len(set(jobs_seen)) == 145          # nothing lost, nothing twice
    assert all(r["status"] == "answered" for r in lines)        # the killed worker's task ran again
    assert _answers(lines) == _answers(_lines(local))            # the same answers as the local batch
    assert {r["method"] for r in lines} == {"nsigma"}


def test_the_scripted_model_on_ray_writes_its_runs_to_the_store(cluster, importer, tmp_path):
    from rcagent.store import Store

    dest, _ = importer("SockShop")
    answer = json.dumps({"analysis": "The service fails.", "root_causes": ["carts"], "solution": "Roll it back."})
    script = tmp_path / "script.json"
    script.write_text(json.dumps([answer] * 80))
    n = len(list((dest / "jobs").glob("ss-*")))     # the folder may hold other systems' jobs too
    out, db = tmp_path / "oneshot.jsonl", tmp_path / "s.db"
    r = subprocess.run([*RCAGENT, "batch", "--jobs", str(dest / "jobs"), "--out", str(out), "--mode", "oneshot",
                        "--backend", "scripted", "--script", str(script), "--store", str(db), "--engine", "ray",
                        "--address", cluster, "--system", "SockShop", "--quiet"], env=ENV, capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    lines = _lines(out)
    assert len(lines) == n and all(r["status"] == "answered" and r["mode"] == "oneshot" for r in lines)
    assert all(r["model_root_causes"] == ["carts"] for r in lines), [(r["job"], r["model_root_causes"], r["note"]) for r in lines]
    store = Store(db, create=False)
    assert {r["id"] for r in store.runs(100)} == {r["run_id"] for r in lines}   # every run, on the driver's node
    # --resume on the same file runs nothing more
    again = subprocess.run([*RCAGENT, "batch", "--jobs", str(dest / "jobs"), "--out", str(out), "--mode", "oneshot",
                            "--backend", "scripted", "--script", str(script), "--store", str(db), "--engine", "ray",
                            "--address", cluster, "--system", "SockShop", "--resume", "--quiet"], env=ENV,
                           capture_output=True, text=True, timeout=600)
    assert again.returncode == 0 and "0 to run" in again.stderr and len(_lines(out)) == n


def test_engine_errors_are_one_line(tmp_path, importer):
    dest, _ = importer("SockShop")
    r = rcagent("batch", "--jobs", dest / "jobs", "--out", tmp_path / "x.jsonl", "--method", "nsigma",
                "--address", "127.0.0.1:1")
    assert r.returncode == 2 and "--address is for --engine ray" in r.stderr
    r = subprocess.run([*RCAGENT, "batch", "--jobs", str(dest / "jobs"), "--out", str(tmp_path / "y.jsonl"),
                        "--method", "nsigma", "--engine", "ray", "--address", f"127.0.0.1:{_free_port()}", "--quiet"],
                       env=ENV, capture_output=True, text=True, timeout=300)
    assert r.returncode == 2 and "cannot join the Ray cluster" in r.stderr
    assert len([line for line in r.stderr.strip().splitlines() if line.startswith("error")]) == 1
