"""Configuration in one place: defaults, overridden by a TOML file, overridden by CLI flags.

The file is `~/.config/rcagent/config.toml` (or the one given with `--config`), for example:

    backend = "openai"
    base_url = "http://127.0.0.1:8000/v1"
    model = "Qwen/Qwen2.5-7B-Instruct"
    max_steps = 15
    store = "~/.local/share/rcagent/rcagent.db"
"""
from __future__ import annotations

import dataclasses
import tomllib
from dataclasses import dataclass
from pathlib import Path

from rcagent.errors import BadInput

DEFAULT_FILE = Path("~/.config/rcagent/config.toml")


def cache_dir() -> Path:
    """Where extracted archives and other re-creatable files go (never inside the repository)."""
    return Path("~/.cache/rcagent").expanduser()


@dataclass
class Settings:
    backend: str = "local"             # local | openai | transformers | scripted
    model: str = "smollm2"             # local: smollm2 | gemma3 | a .gguf path; openai: the served name
    base_url: str = "http://127.0.0.1:8000/v1"
    api_key: str = "none"
    allow_remote: bool = False         # the openai backend refuses non-loopback hosts unless this is set
    max_steps: int = 15
    max_tokens: int = 1536             # per model call (the schema bounds an action below this)
    n_ctx: int = 8192                  # local context window
    threads: int = 2
    temperature: float = 0.0
    seed: int = 0
    snapshot_threshold: int = 900      # observations longer than this (characters) go behind a key
    head_chars: int = 700              # how much of a stored observation the prompt sees
    request_timeout: float = 600.0
    # stabilizers (each can be turned off, as the stability benchmark's ablations do)
    constrain: bool = True             # constrained decoding: the backend follows the action's JSON schema
    jsonregen: bool = True             # repair malformed output (json-repair, then YAML restatement)
    yaml_rounds: int = 2               # at most this many YAML restatements per step
    handlers: bool = True              # error handlers: repeated calls, loops, premature finalize, ...
    schema_limits: bool = True         # with constrain and handlers: drop from the schema what a handler rejects
    loop_window: int = 6               # steps the loop handler looks back
    experts: bool = False              # offer the expert agents (log_expert, code_expert) as tools
    ranking: str = "fused"             # fused: the model's picks voted into the evidence ranking; model: as named
    samples: int = 1                   # self-consistency: finalizations sampled from the greedy prefix (1 = off)
    aggregate: str = "embed"           # how sampled texts are merged: embed (nearest the centroid) | llm
    sample_temperature: float = 0.9    # temperature of those samples
    mode: str = "react"                # react: one controller | span: one agent per span of the anomalous request
    span_factor: float = 100.0         # span mode: entry span this many times its baseline mean is anomalous
    span_pool: int = 4                 # span mode: at most this many agents active at once (K)
    span_delta_s: float = 60.0         # span mode: the tools look +-delta seconds around the span
    span_sigma: float = 3.0            # span mode: n of the metric tool's n-sigma test
    span_obs_chars: int = 700          # span mode: each tool answer cut to this many characters
    span_max_children: int = 6         # span mode: children kept per span after folding repeats
    span_max_depth: int = 6            # span mode: tree depth kept
    span_max_spans: int = 40           # span mode: spans (agents) kept per request, breadth first
    cache: bool = True                 # replay identical greedy model calls from the store
    store: str = "~/.local/share/rcagent/rcagent.db"
    script: str = ""                   # scripted backend: a JSON file holding the list of responses

    def store_path(self) -> Path:
        return Path(self.store).expanduser()


def load_settings(file: str | Path | None = None, **overrides) -> Settings:
    settings = Settings()
    path = Path(file).expanduser() if file else DEFAULT_FILE.expanduser()
    if file and not path.is_file():
        raise BadInput(f"config file not found: {path}")
    if path.is_file():
        try:
            data = tomllib.loads(path.read_text())
        except tomllib.TOMLDecodeError as exc:
            raise BadInput(f"{path}: not valid TOML ({exc})") from None
        _apply(settings, data, str(path))
    _apply(settings, {k: v for k, v in overrides.items() if v is not None}, "command line")
    return settings


def _apply(settings: Settings, data: dict, where: str) -> None:
    fields = {f.name: f for f in dataclasses.fields(Settings)}
    for key, value in data.items():
        key = key.replace("-", "_")
        if key not in fields:
            raise BadInput(f"{where}: unknown setting '{key}'")
        kind = type(getattr(settings, key))
        try:
            setattr(settings, key, kind(value) if kind is not bool else bool(value))
        except (TypeError, ValueError):
            raise BadInput(f"{where}: setting '{key}' expects {kind.__name__}, got {value!r}") from None
