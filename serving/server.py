"""`rcagent serve`: start a local OpenAI-compatible server on loopback and wait until it answers.

Engines: vLLM (GPU workstations; the optional extra `rcagent[vllm]`), started with prefix caching on and
structured outputs available (vLLM honours `response_format` JSON schemas with its default grammar
backend); llama.cpp's server from llama-cpp-python (CPU; what the tests use), which answers one request at
a time; llama.cpp's own `llama-server` binary (CPU; `make llama-server` builds it from the llama.cpp source
inside llama-cpp-python's sdist), which batches `--parallel` requests at once, each slot with its own
`n_ctx`. The server's output goes to a log file; the process stays in the foreground until Ctrl-C.
"""
from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import httpx

from rcagent.errors import BadInput, BackendError
from rcagent.serving import llama_environment

HOST = "127.0.0.1"     # loopback only: telemetry never leaves the machine


ENGINES = ("llama.cpp", "llama-server", "vllm")


def command(engine: str, model: str, port: int, threads: int, n_ctx: int, name: str, parallel: int = 1) -> list[str]:
    if parallel > 1 and engine != "llama-server":
        raise BadInput(f"--parallel applies to --engine llama-server only: {engine} "
                       + ("batches concurrent requests by itself" if engine == "vllm" else
                          "answers one request at a time"))
    if engine == "llama.cpp":
        from rcagent.serving.local import model_path

        if importlib.util.find_spec("llama_cpp") is None or importlib.util.find_spec("uvicorn") is None:
            raise BadInput("the llama.cpp engine needs llama-cpp-python with its server extra: "
                           "pip install 'rcagent[server]'")
        path, chat_format = model_path(model)
        return [sys.executable, "-m", "llama_cpp.server", "--model", str(path), "--host", HOST, "--port", str(port),
                "--n_threads", str(threads), "--n_ctx", str(n_ctx), "--chat_format", chat_format or "chatml",
                "--model_alias", name]
    if engine == "llama-server":
        from rcagent.serving.local import model_path

        exe = shutil.which("llama-server") or shutil.which("llama-server", path=str(Path(sys.executable).parent))
        if exe is None:
            raise BadInput("llama-server is not on PATH: `make llama-server` builds it into .venv/bin "
                           "(10-20 min on 2 cores), or use --engine llama.cpp")
        path, chat_format = model_path(model)
        cmd = [exe, "--model", str(path), "--host", HOST, "--port", str(port), "--threads", str(threads),
               "--ctx-size", str(n_ctx * parallel), "--parallel", str(parallel), "--cont-batching",
               "--alias", name]
        # a chat format of our own means the file's template does not fit (Gemma base): name llama.cpp's
        return cmd + (["--chat-template", chat_format] if chat_format else [])
    if engine == "vllm":
        if importlib.util.find_spec("vllm") is None:
            raise BadInput("vLLM is not installed. On a GPU workstation: pip install 'rcagent[vllm]' "
                           "(it needs a CUDA build of torch); on a CPU-only machine use --engine llama.cpp")
        exe = shutil.which("vllm") or str(Path(sys.executable).with_name("vllm"))
        return [exe, "serve", model, "--host", HOST, "--port", str(port), "--served-model-name", name,
                "--enable-prefix-caching", "--max-model-len", str(n_ctx)]
    raise BadInput(f"unknown engine '{engine}' (choose one of {', '.join(ENGINES)})")


# engine flags that choose where the server listens (llama.cpp, llama-server, vLLM)
BIND_FLAGS = ("--host", "--hostname", "--listen", "--bind", "--uds", "--socket")


def check_extra(extra: list[str], allow_remote: bool) -> None:
    """Flags passed through to the engine must not undo the loopback promise: a --host that is not a
    loopback address is refused unless --allow-remote is given."""
    for i, arg in enumerate(extra):
        flag, _, inline = arg.partition("=")
        if flag not in BIND_FLAGS:
            continue
        value = inline or (extra[i + 1] if i + 1 < len(extra) else "")
        if not allow_remote and not _loopback_host(value):
            raise BadInput(f"engine flag {flag} {value!r} would listen beyond loopback (telemetry could be read "
                           "from other machines); pass --allow-remote if that is intended")


def _loopback_host(host: str) -> bool:
    import ipaddress

    if host in ("localhost",):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def wait_until_ready(proc: subprocess.Popen, base_url: str, log: Path, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            tail = "\n".join(log.read_text(errors="replace").splitlines()[-15:]) if log.is_file() else ""
            raise BackendError(f"the server exited with code {proc.returncode} before answering; "
                               f"last lines of {log}:\n{tail}")
        try:
            if httpx.get(f"{base_url}/models", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    proc.terminate()
    raise BackendError(f"the server did not answer within {timeout:.0f} s (log: {log})")


def start(engine: str, model: str, port: int, log: Path, threads: int = 2, n_ctx: int = 8192,
          name: str | None = None, timeout: float = 600.0, parallel: int = 1,
          extra: list[str] | None = None, allow_remote: bool = False) -> tuple[subprocess.Popen, str]:
    """Start the server and return (process, base_url) once it answers; `extra` goes to the engine as is."""
    name = name or Path(model).stem
    check_extra(list(extra or []), allow_remote)
    cmd = command(engine, model, port, threads, n_ctx, name, parallel) + list(extra or [])
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env=llama_environment(dict(os.environ)))
    base_url = f"http://{HOST}:{port}/v1"
    try:
        wait_until_ready(proc, base_url, log, timeout)
    except BaseException:
        if proc.poll() is None:
            proc.terminate()
        raise
    return proc, base_url
