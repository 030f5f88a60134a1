"""One validation layer for what a user hands rcagent: job.yaml, label files, result lines and the config.

Files are read with a size bound and as UTF-8; YAML is read without aliases (an alias bomb expands to
gigabytes); each document is checked against a pydantic model with strict types and unknown keys refused.
Every failure is a BadInput whose one line names the file, the field and what is wrong.
"""
from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any, Literal, Union

import pydantic
import yaml
from pydantic import BaseModel, ConfigDict, Field, StrictStr

from rcagent.errors import BadInput

MAX_META_BYTES = 1_000_000      # a job.yaml, label or config file larger than this is not one

TableName = Literal["entities", "relations", "metrics", "traces", "logs", "events"]
Time = Union[dt.datetime, dt.date, StrictStr]


class NoAliasLoader(yaml.SafeLoader):
    """SafeLoader that refuses YAML aliases (`*x`): they have no use in these files and allow bombs."""

    def compose_node(self, parent, index):
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            raise yaml.YAMLError(f"aliases (*{event.anchor}) are not allowed, at line {event.start_mark.line + 1}")
        return super().compose_node(parent, index)


def read_text(path: Path, what: str = "file", max_bytes: int = MAX_META_BYTES) -> str:
    """A small text file's content, or BadInput (missing, too large, not UTF-8, unreadable)."""
    try:
        if not path.is_file():
            raise BadInput(f"{path}: {what} not found")
        size = path.stat().st_size
        if size > max_bytes:
            raise BadInput(f"{path}: {size} bytes, more than a {what} can be ({max_bytes})")
        data = path.read_bytes()
    except OSError as exc:
        raise BadInput(f"{path}: cannot read ({exc.strerror or exc})") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BadInput(f"{path}: not UTF-8 text (byte {exc.start})") from None


def load_yaml(path: Path, what: str = "YAML file") -> Any:
    text = read_text(path, what)
    if "\x00" in text:
        raise BadInput(f"{path}: binary content, not YAML")
    try:
        return yaml.load(text, Loader=NoAliasLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise BadInput(f"{path}: not valid YAML ({first})") from None
    except RecursionError:
        raise BadInput(f"{path}: nested too deeply") from None


def error_line(exc: pydantic.ValidationError, where: str) -> str:
    """The first validation error on one line: `where: field: what is wrong`."""
    err = exc.errors()[0]
    field = ".".join(str(p) for p in err["loc"]) or "(document)"
    msg = err["msg"]
    if err["type"] == "extra_forbidden":
        msg = "unknown key (check the spelling)"
    elif err["type"] == "missing":
        msg = "missing"
    got = err.get("input")
    if err["type"] not in ("missing", "extra_forbidden") and not isinstance(got, (dict, list)):
        msg += f", got {str(got)[:60]!r}"
    more = f" (and {len(exc.errors()) - 1} more)" if len(exc.errors()) > 1 else ""
    return f"{where}: {field}: {msg}{more}".replace("\n", " ")


def check(model: type[BaseModel], data: Any, where: str) -> BaseModel:
    try:
        return model.model_validate(data)
    except pydantic.ValidationError as exc:
        raise BadInput(error_line(exc, where)) from None


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class PeriodSpec(_Strict):
    start: Time
    end: Time
    tables: list[TableName] | None = None


class JobMeta(_Strict):
    id: StrictStr = Field(min_length=1, max_length=200)
    alert: StrictStr = Field(max_length=10_000)
    window: PeriodSpec
    system: StrictStr = "unknown"
    source: StrictStr | None = None
    baseline: list[PeriodSpec] | PeriodSpec | None = None
    tables: dict[TableName, StrictStr] | None = None


class LabelCause(BaseModel):
    model_config = ConfigDict(extra="allow")
    entity: StrictStr = Field(min_length=1)
    level: StrictStr | None = None
    service: StrictStr | None = None


class Label(BaseModel):
    """A label file: the importers' fields are kept; the scorer needs root_causes."""
    model_config = ConfigDict(extra="allow")
    root_causes: list[LabelCause] = Field(min_length=1)
    source: StrictStr = ""
    system: StrictStr = ""
    fault_type: StrictStr | None = None
    root_cause: StrictStr | None = None
    solution: StrictStr | None = None


class ResultCause(BaseModel):
    model_config = ConfigDict(extra="allow")
    entity: StrictStr


class ResultLine(BaseModel):
    """A batch result line as eval reads it (the other fields are kept as they are)."""
    model_config = ConfigDict(extra="allow")
    job: StrictStr = Field(min_length=1)
    root_causes: list[ResultCause] | None = None
    status: StrictStr = "answered"
    method: StrictStr | None = None
    mode: StrictStr | None = None
    model: StrictStr | None = None
    job_path: StrictStr | None = None
    wall_s: float | None = None
    llm_calls: int | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    steps: int | None = None
    invalid_steps: int | None = None


def safe_name(value: str, what: str) -> str:
    """A name that becomes one path component (a job id, a run id): no separators, no '..', no NUL."""
    if not value or value in (".", "..") or any(c in value for c in "/\\\x00") or len(value) > 200:
        raise BadInput(f"{what} {value[:60]!r} is not a plain name (no path separators or '..')")
    return value


MAX_ANSWER_CHARS = 32_000       # a model answer longer than this is cut before parsing (max_tokens bounds it too)
MAX_DEPTH = 8                   # an action nests objects and lists at most this deep


def clean_answer(text) -> str:
    """A model's answer made safe to parse and store: text, bounded, lone surrogates replaced."""
    text = text if isinstance(text, str) else str(text or "")
    return text[:MAX_ANSWER_CHARS].encode("utf-8", "surrogatepass").decode("utf-8", "replace")


def unsurrogate(value):
    """A parsed JSON value with lone surrogates (from `\\ud800` escapes) replaced in every string, so that
    it can be stored and printed as UTF-8."""
    if isinstance(value, str):
        return value.encode("utf-8", "surrogatepass").decode("utf-8", "replace")
    if isinstance(value, list):
        return [unsurrogate(v) for v in value]
    if isinstance(value, dict):
        return {unsurrogate(str(k)): unsurrogate(v) for k, v in value.items()}
    return value


def depth(value, limit: int = MAX_DEPTH) -> int:
    """How deeply lists and dicts nest in `value` (stops counting past `limit`)."""
    stack, deepest = [(value, 1)], 0
    while stack:
        item, d = stack.pop()
        if isinstance(item, (dict, list)):
            deepest = max(deepest, d)
            if d > limit:
                return d
            stack.extend((v, d + 1) for v in (item.values() if isinstance(item, dict) else item))
    return deepest
