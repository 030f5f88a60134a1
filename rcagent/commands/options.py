"""Options and checks the subcommands share: the output format, the model and run options, output files,
settings from the config file and the flags, and stopping on SIGTERM."""
from __future__ import annotations

import functools
import os
import signal
from pathlib import Path

import click

from rcagent.config import load_settings
from rcagent.errors import BadInput


def output_format(fn):
    """One reusable option for output formats (sqlite-utils style)."""
    @click.option("--format", "fmt", type=click.Choice(["text", "json", "md"]), default="text",
                  show_default=True, help="Output format.")
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        return fn(*args, **kwargs)
    return wrapper


def model_options(fn):
    """Options that choose and configure the model backend; they override the config file."""
    options = [
        click.option("--config", type=click.Path(dir_okay=False), help="Config file (TOML)."),
        click.option("--backend", type=click.Choice(["local", "openai", "transformers", "scripted"]),
                     help="Model backend (default: local llama.cpp)."),
        click.option("--model", help="Model: smollm2 | gemma3 | qwen2.5-coder-1.5b (make qwen) | a .gguf path (local); "
                                       "the served name (openai)."),
        click.option("--base-url", help="OpenAI-compatible server URL, e.g. http://127.0.0.1:8000/v1."),
        click.option("--allow-remote", is_flag=True, default=None,
                     help="Allow a non-loopback --base-url (telemetry leaves the machine)."),
        click.option("--max-steps", type=click.IntRange(1, 200), help="Step limit (default 15)."),
        click.option("--experts/--no-experts", default=None,
                     help="Offer the expert agents (log_expert, code_expert) as tools (off by default)."),
        click.option("--store", type=click.Path(dir_okay=False), help="SQLite store of runs and snapshots."),
        click.option("--script", type=click.Path(dir_okay=False),
                     help="Scripted backend: JSON file with the list of model responses to replay."),
    ]
    for option in reversed(options):
        fn = option(fn)
    return fn


def run_options(fn):
    """How the agent runs (analyze and batch): the mode and self-consistency at finalization."""
    options = [
        click.option("--mode", type=click.Choice(["react", "span", "oneshot", "sql", "graph"]),
                     help="react: one controller (default); span: one agent per span of the anomalous request "
                          "(RCLAgent), in parallel, jobs without traces fall back to react; oneshot: the whole case "
                          "as one evidence package, one call; sql: a ReAct loop of read-only SQL over the job's "
                          "tables (oneshot and sql: RCAtlas's free harnesses); graph: a walk over the anomaly fusion "
                          "graph from the alert to the source, each suspect checked by a verifier (GAMA)."),
        click.option("--samples", type=click.IntRange(1, 64),
                     help="Sample this many finalizations from the greedy run's last prefix and aggregate them "
                          "(self-consistency; 1 = off, the paper uses 10)."),
        click.option("--aggregate", type=click.Choice(["embed", "llm"]),
                     help="How the sampled texts are merged: embed (nearest the MiniLM centroid; needs the eval "
                          "extra) or llm (the model merges them)."),
        click.option("--no-redact", "no_redact", is_flag=True, default=None,
                     help="Show the job's text as it is: no placeholders for secrets, e-mail and IP addresses "
                          "(redaction is on by default; the config's `redact`)."),
    ]
    for option in reversed(options):
        fn = option(fn)
    return fn


def writable_file(path: str, option: str) -> Path:
    """An output file given on the command line, checked before the work: its folder exists and can be
    written, and it is not a folder (an error after an hour of work would lose the result)."""
    file = Path(path).expanduser()
    folder = file.parent
    if not folder.is_dir():
        raise BadInput(f"{option} {path}: the folder {folder} does not exist")
    if file.is_dir():
        raise BadInput(f"{option} {path}: is a folder")
    if not os.access(folder, os.W_OK) or (file.exists() and not os.access(file, os.W_OK)):
        raise BadInput(f"{option} {path}: not writable")
    return file


def model_settings(config, backend, model, base_url, allow_remote, max_steps, script, experts=None, **more):
    """Settings from the config file and the model_options flags (a backend's default model name if none)."""
    settings = load_settings(config, backend=backend, model=model, base_url=base_url, allow_remote=allow_remote,
                             max_steps=max_steps, script=script, experts=experts, **more)
    if backend and not model and backend != "local":
        settings.model = {"openai": "default", "scripted": "scripted"}.get(backend, settings.model)
    return settings


def stop_on_sigterm() -> None:
    """SIGTERM (systemd, Kubernetes, `timeout`) stops like Ctrl-C: runs are marked interrupted, a batch
    stays resumable, a served engine is stopped."""
    def stop(signum, frame):
        raise KeyboardInterrupt
    signal.signal(signal.SIGTERM, stop)
