"""Backends: the loopback guard, the real local model end to end, and the openai backend against a real
OpenAI-compatible server (llama.cpp's) started on loopback."""
from __future__ import annotations

import socket
import subprocess
import sys

import pytest

from rcagent.config import Settings
from rcagent.controller import Controller
from rcagent.errors import BadInput
from rcagent.serving import make_backend
from rcagent.serving.local import model_path
from rcagent.serving.openai import OpenAIBackend, is_loopback


@pytest.mark.parametrize("url, ok", [
    ("http://127.0.0.1:8000/v1", True), ("http://localhost:1/v1", True), ("http://[::1]:8000/v1", True),
    ("http://127.5.5.5/v1", True), ("http://10.0.0.1:8000/v1", False), ("https://api.example.com/v1", False),
])
def test_loopback_guard(url, ok):
    assert is_loopback(url) is ok
    if not ok:
        with pytest.raises(BadInput, match="non-loopback"):
            OpenAIBackend(url, "m")
        OpenAIBackend(url, "m", allow_remote=True)  # explicit permission


def test_unknown_backend_and_model_are_bad_input():
    with pytest.raises(BadInput, match="unknown backend"):
        make_backend(Settings(backend="cloud"))
    with pytest.raises(BadInput, match="not found"):
        model_path("no-such-model")


def assert_valid_run(d, job):
    assert d.steps >= 1 and d.llm_calls == d.steps
    assert d.root_causes and all(r.entity in job.entities for r in d.root_causes)
    assert d.prompt_tokens > 0 and d.completion_tokens > 0


@pytest.mark.model
def test_local_model_end_to_end(contacts_job, store, tmp_path):
    settings = Settings(backend="local", store=str(tmp_path / "s.db"))
    backend = make_backend(settings)
    d = Controller(contacts_job, backend, store, settings).run()
    assert_valid_run(d, contacts_job)
    # constrained decoding: every step parsed as a valid action
    assert d.invalid_steps == 0
    assert store.get_run(d.run_id)["status"] in ("finalized", "step_limit")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def llama_server(tmp_path_factory):
    """A real llama.cpp server on loopback, started the way users start one: `rcagent serve`."""
    log = tmp_path_factory.mktemp("serve") / "serve.log"
    proc = subprocess.Popen([sys.executable, "-c", "from rcagent.cli import main; main()", "serve", "--model",
                             "smollm2", "--port", str(free_port()), "--log", str(log)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    url = proc.stdout.readline().strip()     # printed once the server answers
    if not url.startswith("http://127.0.0.1:"):
        proc.kill()
        pytest.fail(f"rcagent serve did not start: {proc.stderr.read()[-2000:]}")
    yield url
    proc.terminate()                         # serve stops its server on SIGTERM
    assert proc.wait(timeout=30) == 0
    assert "server stopped" in proc.stderr.read()


@pytest.mark.server
def test_openai_backend_against_a_real_server(llama_server, contacts_job, store, tmp_path):
    settings = Settings(backend="openai", base_url=llama_server, model="smollm2", max_steps=4,
                        store=str(tmp_path / "s.db"))
    backend = make_backend(settings)
    d = Controller(contacts_job, backend, store, settings).run()
    assert_valid_run(d, contacts_job)
    assert d.invalid_steps == 0  # the schema went out as structured output and was honoured
    assert backend.format == "json_object"  # llama-cpp-python's server form, found by the fallback


@pytest.mark.server
def test_self_consistency_against_a_real_server(llama_server, contacts_job, store, tmp_path):
    """n samples in one request; llama.cpp's server answers one choice each, so the rest are asked again."""
    settings = Settings(backend="openai", base_url=llama_server, model="smollm2", max_steps=3, samples=3,
                        aggregate="llm", store=str(tmp_path / "s.db"))
    backend = make_backend(settings)
    hello = [{"role": "user", "content": "Name one colour."}]
    out = backend.complete(hello, n=3, temperature=0.9, max_tokens=8)
    assert len(out) == 3 and all(c.text for c in out)
    d = Controller(contacts_job, backend, store, settings).run()
    assert d.finalized and d.consistency["samples"] == 3
    assert d.consistency["kept"] + sum(d.consistency["dropped"].values()) == 3
    assert len(store.samples(d.run_id)) == 3
    if d.consistency["kept"]:                       # the aggregate's vote order is the diagnosis's own picks
        assert d.model_root_causes == d.consistency["order"]


@pytest.mark.server
def test_batch_sends_concurrent_requests_to_the_served_model(llama_server, job_of, tmp_path):
    from rcagent.batch import read_results
    from tests.test_cli import rcagent
    jobs = tmp_path / "jobs"
    jobs.mkdir()
    for case in ("2023-01-29_08_43", "2023-01-29_08_52"):
        (jobs / job_of(case).name).symlink_to(job_of(case))
    out = tmp_path / "react.jsonl"
    r = rcagent("batch", "--jobs", str(jobs), "--out", str(out), "--backend", "openai", "--base-url", llama_server,
                "--model", "smollm2", "--concurrency", "2", "--max-steps", "3", "--store", str(tmp_path / "b.db"))
    assert r.returncode == 0, r.stderr
    lines = read_results(out)
    assert sorted(x["job"] for x in lines) == sorted(p.name for p in jobs.iterdir())
    assert all(x["status"] == "answered" and x["backend"] == "openai" and x["steps"] <= 3 for x in lines)
    assert "(2 at a time)" in r.stderr


def test_serve_without_vllm_says_so(tmp_path):
    import importlib.util
    from tests.test_cli import rcagent
    if importlib.util.find_spec("vllm"):
        pytest.skip("vLLM is installed here")
    r = rcagent("serve", "--model", "some/model", "--engine", "vllm", "--log", str(tmp_path / "log"))
    assert r.returncode == 2 and "vLLM is not installed" in r.stderr and "--engine llama.cpp" in r.stderr


@pytest.mark.model
def test_local_gemma_folds_the_system_prompt_and_acts_validly(contacts_job, store, tmp_path):
    from rcagent.serving.local import fold_system
    folded = fold_system([{"role": "system", "content": "rules"}, {"role": "user", "content": "task"},
                          {"role": "assistant", "content": "a"}, {"role": "user", "content": "obs"}])
    assert folded[0] == {"role": "user", "content": "rules\n\ntask"} and len(folded) == 3
    settings = Settings(backend="local", model="gemma3", max_steps=3, store=str(tmp_path / "s.db"))
    backend = make_backend(settings)
    d = Controller(contacts_job, backend, store, settings).run()
    assert_valid_run(d, contacts_job)
    assert d.invalid_steps == 0


def test_json_object_done():
    from rcagent.serving import json_object_done
    assert not json_object_done('The answer is {"a": "}"')
    assert json_object_done('{"a": "}", "b": {"c": 1}} and more')
    assert not json_object_done("no json here")


def test_unconstrained_generation_stops_early():
    from rcagent.serving import stop_early
    assert stop_early('```json\n{"action": "logs", "arguments": {"entity": "a"}}')
    assert not stop_early('{"action": "logs", "arguments": {"entity": ')
    # prose that only mentions a brace later is not cut at the brace
    assert not stop_early('I will call {"action": "logs"}')
    # SmolLM2's measured degenerate outputs stop once they repeat themselves
    assert stop_early("1. " + "1." * 120) and stop_early("The incident tt-8e0d397.\n\n" * 10)
    assert not stop_early("thought: check the logs\naction: logs\narguments:\n  entity: ts-order-service\n")


@pytest.mark.model
def test_local_backend_unconstrained_output_is_cut_when_it_degenerates(contacts_job, store, tmp_path):
    """The real model without a grammar: on the real task prompt it writes no valid action and never runs to
    max_tokens (it looped on every job of the stability benchmark; what it writes depends on the prompt,
    and so on the ranking in it); asked to repeat itself, it loops, and the stream is cut by stop_early."""
    from rcagent.serving import stop_early
    settings = Settings(backend="local", max_steps=1, constrain=False, yaml_rounds=0, cache=False,
                        store=str(tmp_path / "s.db"))
    backend = make_backend(settings)
    d = Controller(contacts_job, backend, store, settings).run()
    [step] = store.steps(d.run_id)
    assert step["valid"] == 0 and step["completion_tokens"] < settings.max_tokens // 4
    [loop] = backend.complete([{"role": "user", "content": "Write the numbers 1. 1. 1. 1. and go on repeating "
                                                           "'1.' forever."}], max_tokens=settings.max_tokens)
    assert stop_early(loop.text) and loop.completion_tokens < settings.max_tokens // 4


@pytest.mark.model
def test_transformers_backend_runs_a_local_gguf(contacts_job, store, tmp_path):
    """The bundled SmolLM2 GGUF loaded by transformers (no hub): it generates, unconstrained."""
    path, _ = model_path("smollm2")
    settings = Settings(backend="transformers", model=str(path), max_steps=1, max_tokens=32,
                        store=str(tmp_path / "s.db"))
    backend = make_backend(settings)
    [c] = backend.complete([{"role": "user", "content": "Say hello."}], max_tokens=16)
    assert c.text.strip() and c.prompt_tokens > 0 and 0 < c.completion_tokens <= 16
    d = Controller(contacts_job, backend, store, settings).run()
    # a 135M model without a grammar rarely writes the JSON action: the run still ends with a diagnosis;
    # JsonRegen may ask for up to yaml_rounds restatements on top of the step's own call
    assert d.steps == 1 and 1 <= d.llm_calls <= 1 + settings.yaml_rounds and d.root_causes
    assert all(r.entity in contacts_job.entities for r in d.root_causes)


def test_llama_server_engine_batches_parallel_slots(tmp_path, monkeypatch):
    import os
    from rcagent.serving.server import command
    from tests.test_cli import rcagent
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(sys, "executable", str(tmp_path / "python"))     # nor beside the interpreter
    with pytest.raises(BadInput, match="make llama-server"):
        command("llama-server", "smollm2", 8000, 2, 4096, "smollm2", parallel=4)
    with pytest.raises(BadInput, match="one request at a time"):
        command("llama.cpp", "smollm2", 8000, 2, 4096, "smollm2", parallel=4)
    exe = tmp_path / "llama-server"        # a stand-in that prints the command line it got and fails
    exe.write_text('#!/bin/sh\necho "args: $*"\nexit 3\n')
    exe.chmod(0o755)
    cmd = command("llama-server", "smollm2", 8000, 2, 4096, "smollm2", parallel=4)
    args = dict(zip(cmd[1::2], cmd[2::2]))
    assert cmd[0] == str(exe) and args["--host"] == "127.0.0.1" and args["--parallel"] == "4"
    assert args["--ctx-size"] == str(4 * 4096) and "--cont-batching" in cmd    # every slot keeps its n_ctx
    assert args["--model"] == str(model_path("smollm2")[0]) and "--chat-template" not in cmd
    # through the CLI: what follows `--` reaches the engine, and a server that dies is reported with its log
    monkeypatch.undo()
    r = rcagent("serve", "--model", "smollm2", "--engine", "llama-server", "--parallel", "2", "--n-ctx", "2048",
                "--log", str(tmp_path / "log"), "--", "--cache-ram", "0",
                env={**os.environ, "PATH": f"{tmp_path}{os.pathsep}{os.environ['PATH']}"})
    assert r.returncode != 0 and "exited with code 3" in r.stderr
    assert "--parallel 2" in r.stderr and "--ctx-size 4096" in r.stderr and r.stderr.count("--cache-ram 0") == 1
