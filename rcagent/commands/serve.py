"""`rcagent serve`: a local OpenAI-compatible server on loopback (llama.cpp, llama-server or vLLM)."""
from __future__ import annotations

import sys
from pathlib import Path

import click

from rcagent.commands.options import stop_on_sigterm
from rcagent.errors import BackendError


@click.command()
@click.option("--model", required=True,
              help="llama.cpp: smollm2 | gemma3 | a .gguf path; vllm: a model folder or its Hugging Face name "
                   "(already in the local cache).")
@click.option("--engine", type=click.Choice(["vllm", "llama.cpp", "llama-server"]), default="llama.cpp",
              show_default=True,
              help="vllm on a GPU workstation (pip install 'rcagent[vllm]'); llama.cpp on a CPU (one request at "
                   "a time); llama-server: llama.cpp's own server, batching --parallel requests "
                   "(`make llama-server` builds it).")
@click.option("--parallel", default=1, show_default=True, type=click.IntRange(1, 64),
              help="llama-server: requests answered at once (slots of --n-ctx each), e.g. span mode's pool or "
                   "batch --concurrency.")
@click.option("--port", default=8000, show_default=True, type=click.IntRange(1, 65535), help="Port on 127.0.0.1.")
@click.option("--name", help="The model name clients send (default: the model's file or folder name).")
@click.option("--threads", default=2, show_default=True, type=click.IntRange(1, 512), help="llama.cpp: CPU threads.")
@click.option("--n-ctx", default=8192, show_default=True, type=click.IntRange(256), help="Context window.")
@click.option("--wait", default=600, show_default=True, type=click.FloatRange(1),
              help="Seconds to wait for the server to answer.")
@click.option("--log", "log_file", type=click.Path(dir_okay=False),
              help="Server log (default: ~/.cache/rcagent/serve-PORT.log).")
@click.option("--allow-remote", is_flag=True,
              help="Allow engine flags after -- that listen beyond loopback (e.g. --host 0.0.0.0).")
@click.argument("engine_args", nargs=-1, type=click.UNPROCESSED)
def serve(model, engine, port, name, threads, n_ctx, wait, log_file, parallel, allow_remote, engine_args):
    """Start a local OpenAI-compatible server on loopback for `analyze` and `batch` (Ctrl-C stops it).

    Anything after `--` goes to the engine as it is, e.g. `-- --cache-ram 0` for llama-server."""
    from rcagent.config import cache_dir
    from rcagent.serving.server import check_extra, start

    check_extra(list(engine_args), allow_remote)
    log = Path(log_file).expanduser() if log_file else cache_dir() / f"serve-{port}.log"
    click.echo(f"starting {engine} with {model} on 127.0.0.1:{port} (log: {log}) ...", err=True)
    stop_on_sigterm()                        # a service manager's stop also stops the server
    proc, base_url = start(engine, model, port, log, threads=threads, n_ctx=n_ctx, name=name, timeout=wait,
                           parallel=parallel, extra=list(engine_args), allow_remote=allow_remote)
    served = name or Path(model).stem
    try:   # from the moment a client can know the address, a stop is a clean stop (exit 0)
        click.echo(f"ready: --backend openai --base-url {base_url} --model {served}", err=True)
        click.echo(base_url)
        sys.stdout.flush()
        proc.wait()
    except KeyboardInterrupt:
        proc.terminate()
        proc.wait(timeout=30)
        click.echo("server stopped", err=True)
        return
    raise BackendError(f"the server exited with code {proc.returncode} (log: {log})")
