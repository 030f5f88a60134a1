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
import math
import tomllib
import typing
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Literal

import pydantic
from pydantic import ConfigDict, Field

from rcagent.errors import BadInput
from rcagent.validate import error_line, read_text

DEFAULT_FILE = Path("~/.config/rcagent/config.toml")


def cache_dir() -> Path:
    """Where extracted archives and other re-creatable files go (never inside the repository)."""
    return Path("~/.cache/rcagent").expanduser()


@dataclass
class Settings:
    # local | openai | transformers | scripted
    backend: Literal["local", "openai", "transformers", "scripted"] = "local"
    model: str = "smollm2"  # local: smollm2 | gemma3 | a .gguf path; openai: the served name
    base_url: str = "http://127.0.0.1:8000/v1"
    api_key: str = "none"
    allow_remote: bool = False  # the openai backend refuses non-loopback hosts unless this is set
    max_steps: Annotated[int, Field(ge=1, le=200)] = 15
    # per model call (the schema bounds an action below this)
    max_tokens: Annotated[int, Field(ge=16, le=65536)] = 1536
    n_ctx: Annotated[int, Field(ge=256, le=1_048_576)] = 8192  # local context window
    threads: Annotated[int, Field(ge=1, le=512)] = 2
    temperature: Annotated[float, Field(ge=0, le=5)] = 0.0
    seed: int = 0
    # observations longer than this (characters) go behind a key
    snapshot_threshold: Annotated[int, Field(ge=100)] = 900
    head_chars: Annotated[int, Field(ge=100)] = 700        # how much of a stored observation the prompt sees
    request_timeout: Annotated[float, Field(gt=0)] = 600.0
    # stabilizers (each can be turned off, as the stability benchmark's ablations do)
    constrain: bool = True  # constrained decoding: the backend follows the action's JSON schema
    jsonregen: bool = True  # repair malformed output (json-repair, then YAML restatement)
    yaml_rounds: Annotated[int, Field(ge=0, le=5)] = 2     # at most this many YAML restatements per step
    handlers: bool = True  # error handlers: repeated calls, loops, premature finalize, ...
    schema_limits: bool = True  # with constrain and handlers: drop from the schema what a handler rejects
    experts: bool = False  # offer the expert agents (log_expert, code_expert) as tools
    # fused: the model's picks voted into the evidence ranking; model: as named
    ranking: Literal["fused", "model"] = "fused"
    # fused (react, oneshot, sql): the weight of the model's first pick against the top entity's evidence (1);
    # 0 = the evidence ranks, the model's order breaks its ties. Chosen leave-one-system-out on the default
    # model's runs (benchmarks/fusion_replay.py); measure a larger model the same way before raising it
    model_vote: Annotated[float, Field(ge=0, le=10)] = 0.0
    # self-consistency: finalizations sampled from the greedy prefix (1 = off)
    samples: Annotated[int, Field(ge=1, le=64)] = 1
    aggregate: Literal["embed", "llm"] = "embed"  # how sampled texts are merged: embed (nearest the centroid) | llm
    sample_temperature: Annotated[float, Field(ge=0, le=5)] = 0.9  # temperature of those samples
    # react: one controller | span: one agent per span of the anomalous request | oneshot: the whole case in
    # one call | sql: a ReAct loop of SQL queries over the job's tables (the last two: RCAtlas's free harnesses)
    # | graph: the coordinator's walk over the anomaly fusion graph (GAMA)
    mode: Literal["react", "span", "oneshot", "sql", "graph"] = "react"
    oneshot_tokens: Annotated[int, Field(ge=500, le=1_000_000)] = 3000  # one-shot: the evidence package's budget
    sql_max_steps: Annotated[int, Field(ge=1, le=100)] = 100  # sql: at most this many calls (as RCAtlas' agent)
    sql_rows: Annotated[int, Field(ge=1, le=1000)] = 30       # sql: rows of a query result shown
    sql_timeout_s: Annotated[float, Field(gt=0, le=600)] = 10.0  # sql: a query running longer is stopped
    # sql: the query grammar of constrained decoding: schema (one table's columns and types: every query binds)
    # | free (any one SELECT; for a model that writes joins and subqueries)
    sql_grammar: Literal["schema", "free"] = "schema"
    # span mode: entry span this many times its baseline mean is anomalous
    span_factor: Annotated[float, Field(gt=0)] = 100.0
    span_pool: Annotated[int, Field(ge=1, le=64)] = 4      # span mode: at most this many agents active at once (K)
    span_delta_s: Annotated[float, Field(gt=0)] = 60.0  # span mode: the tools look +-delta seconds around the span
    span_sigma: Annotated[float, Field(gt=0)] = 3.0        # span mode: n of the metric tool's n-sigma test
    span_obs_chars: Annotated[int, Field(ge=100)] = 700  # span mode: each tool answer cut to this many characters
    span_max_children: Annotated[int, Field(ge=1)] = 6  # span mode: children kept per span after folding repeats
    span_max_depth: Annotated[int, Field(ge=1)] = 6        # span mode: tree depth kept
    span_max_spans: Annotated[int, Field(ge=1)] = 40  # span mode: spans (agents) kept per request, breadth first
    # graph mode (GAMA §4.2; thresholds as the paper's defaults, not tuned here)
    graph_tau_conf: Annotated[float, Field(ge=0, le=1)] = 0.85    # a diagnoser's P(root) from this goes to the verifier
    graph_tau_verify: Annotated[float, Field(ge=0, le=1)] = 0.90  # a suspect with this Vscore is the root cause
    graph_max_steps: Annotated[int, Field(ge=1, le=100)] = 10     # graph mode: nodes visited at most
    graph_verifier: bool = True        # graph mode: off = accept the diagnoser's suspect (ablation)
    graph_backtrack: bool = True       # graph mode: off = a dead end ends the walk (ablation)
    graph_navigator: Literal["gradient", "random"] = "gradient"   # random: a random neighbour (ablation)
    graph_summaries: bool = True       # graph mode: the model writes each visited node's health report
    graph_challenge: bool = True       # graph mode: a verdict contradicting the graph is asked again, then overruled
    graph_arbitrations: Annotated[int, Field(ge=0, le=50)] = 3    # graph mode: model calls linking ambiguous logs
    cache: bool = True                                     # replay identical greedy model calls from the store
    redact: bool = True    # secrets and personal data in the job's text become placeholders before anything reads it
    store: str = "~/.local/share/rcagent/rcagent.db"
    script: str = ""  # scripted backend: a JSON file holding the list of responses

    def store_path(self) -> Path:
        return Path(self.store).expanduser()


def load_settings(file: str | Path | None = None, **overrides) -> Settings:
    """Defaults, then the config file, then the CLI flags given (None = not given); all checked before any
    work starts: unknown keys, wrong types and out-of-range values are a BadInput naming file and key."""
    path = Path(file).expanduser() if file else DEFAULT_FILE.expanduser()
    if file and not path.is_file():
        raise BadInput(f"config file not found: {path}")
    values: dict = {}
    if path.is_file():
        try:
            data = tomllib.loads(read_text(path, "config file"))
        except tomllib.TOMLDecodeError as exc:
            raise BadInput(f"{path}: not valid TOML ({str(exc).splitlines()[0]})") from None
        values.update(_checked(data, str(path)))
    values.update(_checked({k: v for k, v in overrides.items() if v is not None}, "command line"))
    settings = Settings(**values)
    _check_url(settings.base_url, "command line" if overrides.get("base_url") else str(path))
    return settings


@typing.no_type_check
def _schema() -> type[pydantic.BaseModel]:
    """A strict pydantic model with exactly the fields (types, ranges, choices) of Settings."""
    hints = typing.get_type_hints(Settings, include_extras=True)
    return pydantic.create_model(
        "SettingsFile", __config__=ConfigDict(strict=True, extra="forbid"),
        **{f.name: (hints[f.name], f.default) for f in dataclasses.fields(Settings)})


SettingsFile = _schema()


def _checked(data: dict, where: str) -> dict:
    """The given keys, validated (no defaults filled in), or BadInput naming the key and what is wrong."""
    data = {str(k).replace("-", "_"): v for k, v in data.items()}
    for key, value in data.items():
        if isinstance(value, float) and not math.isfinite(value):
            raise BadInput(f"{where}: {key}: must be a finite number, got {value!r}")
    try:
        model = SettingsFile.model_validate(data)
    except pydantic.ValidationError as exc:
        raise BadInput(error_line(exc, where).replace("unknown key (check the spelling)", "unknown setting")) from None
    return {k: getattr(model, k) for k in data}


def _check_url(url: str, where: str) -> None:
    try:
        parts = urllib.parse.urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError on a bad port
    except ValueError as exc:
        raise BadInput(f"{where}: base_url: {url!r} does not parse ({exc})") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise BadInput(f"{where}: base_url: {url!r} is not an http(s) URL with a host")
