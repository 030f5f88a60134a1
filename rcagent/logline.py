"""What a log line says of itself: its level and its trace id, for log lines whose source gives neither
(a Loki stream with no `level` label, an OTLP record with no severity, a container's log file); and its
message, the text a structured logger wraps in a JSON object of fields (time, thread, request id).

The level is read from the line as the common loggers write it: a JSON object's `level`, `severity`,
`lvl`, `levelname`, `log.level` (ECS) or `@l` (Serilog) field, pino's and bunyan's numbers (30 info, 50
error), logfmt's `level=warn`, klog's and glog's letter before the date (`E1207 10:00:00.123`), or a level
word in capitals near the start (`2024-05-01 10:00:00 WARN [main] ...`, `[ERROR]`). Spellings are
normalised (`err` -> ERROR, `warning` -> WARN, `information` -> INFO); a value that names no level is no
level, never a guess.
"""
from __future__ import annotations

import json
import re

# spellings -> the names the rest of rcagent uses (rcagent.errorlike)
_NAMES = {
    "TRACE": "TRACE", "FINEST": "TRACE", "FINER": "TRACE", "VERBOSE": "TRACE",
    "DEBUG": "DEBUG", "DBG": "DEBUG", "FINE": "DEBUG", "CONFIG": "DEBUG",
    "INFO": "INFO", "INFORMATION": "INFO", "INFORMATIONAL": "INFO", "NOTICE": "INFO", "I": "INFO",
    "WARN": "WARN", "WARNING": "WARN", "W": "WARN",
    "ERROR": "ERROR", "ERR": "ERROR", "E": "ERROR", "SEVERE": "ERROR",
    "CRITICAL": "FATAL", "CRIT": "FATAL", "FATAL": "FATAL", "F": "FATAL", "ALERT": "FATAL", "EMERG": "FATAL",
    "EMERGENCY": "FATAL", "PANIC": "FATAL", "DPANIC": "FATAL",
}
_LEVEL_KEYS = ("level", "severity", "lvl", "loglevel", "log_level", "levelname", "severity_text", "log.level",
               "@l", "@level", "level_name")
_TRACE_KEYS = ("trace_id", "traceid", "trace.id", "traceId", "traceID", "dd.trace_id", "logging.googleapis.com/trace")
# where a structured logger puts the message: logback's and zap's `message`/`msg`, Serilog's `@m`,
# structlog's `event`, journald's `MESSAGE`, a container runtime's `log`; the first that holds a string
MESSAGE_KEYS = ("message", "msg", "Message", "MESSAGE", "@m", "event", "log", "body")
# pino and bunyan: 10 trace, 20 debug, 30 info, 40 warn, 50 error, 60 fatal
_NUMBERED = ((60, "FATAL"), (50, "ERROR"), (40, "WARN"), (30, "INFO"), (20, "DEBUG"), (10, "TRACE"))
_KLOG = re.compile(r"^([IWEF])\d{4} \d\d:\d\d:\d\d")
_LOGFMT = re.compile(r"(?:^|\s)(?:level|lvl|severity)=\"?([A-Za-z]+)", re.I)
# the level words a line's header states in capitals (`WARN [main]`, `[ERROR]`)
LEVEL_WORDS = "TRACE|DEBUG|INFO|NOTICE|WARN|WARNING|ERROR|SEVERE|CRITICAL|FATAL"
_WORD = re.compile(rf"(?<![\w.-])\[?({LEVEL_WORDS})\]?(?![\w.-])")
_TRACE_TEXT = re.compile(r"trace[_ .-]?id[\"']?\s*[:=]\s*[\"']?([0-9a-f]{16,32})\b", re.I)


def level_name(value) -> str | None:
    """A level as a logger or a label spells it, in rcagent's names; None when it names no level."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return next((name for floor, name in _NUMBERED if value >= floor), None)
    if not isinstance(value, str):
        return None
    text = value.strip().upper()
    if text.isdigit():
        return level_name(int(text))
    return _NAMES.get(text)


def _json_fields(line: str) -> dict | None:
    text = line.strip()
    if not (text.startswith("{") and text.endswith("}")):
        return None
    try:
        doc = json.loads(text)
    except (ValueError, RecursionError):
        return None
    return doc if isinstance(doc, dict) else None


def _field(doc: dict, keys: tuple[str, ...]):
    lower = {str(k).lower(): v for k, v in doc.items()}
    for key in keys:
        value = lower.get(key.lower())
        if value is None and "." in key:   # ECS writes log.level nested too: {"log": {"level": ...}}
            head, _, tail = key.partition(".")
            inner = lower.get(head)
            value = inner.get(tail) if isinstance(inner, dict) else None
        if value not in (None, ""):
            return value
    return None


def level_of(line: str | None) -> str | None:
    """The level a log line states, or None."""
    if not line:
        return None
    doc = _json_fields(line)
    if doc is not None:
        return level_name(_field(doc, _LEVEL_KEYS))
    head = line.lstrip()[:160]
    m = _KLOG.match(head)
    if m:
        return _NAMES[m.group(1)]
    m = _LOGFMT.search(head)
    if m and level_name(m.group(1)):
        return level_name(m.group(1))
    m = _WORD.search(head)
    return _NAMES[m.group(1)] if m else None


def trace_of(line: str | None) -> str | None:
    """The trace id a log line states (a JSON field, or `trace_id=...`/`TraceID: ...` in its text), or None."""
    if not line:
        return None
    doc = _json_fields(line)
    if doc is not None:
        value = _field(doc, _TRACE_KEYS)
        if isinstance(value, str) and value:
            return value.rsplit("/", 1)[-1].lower()   # Cloud Logging: projects/P/traces/ID
    m = _TRACE_TEXT.search(line[:400])
    return m.group(1).lower() if m else None


def described(line: str | None, level=None, trace: str | None = None) -> tuple[str | None, str | None]:
    """A line's level and trace id: those its source gives (the level in rcagent's spelling, or as given
    when it names none a logger uses and the line states none either), else those the line states."""
    return level_name(level) or level_of(line) or (str(level) if level else None), trace or trace_of(line)


def message_of(line: str | None) -> str | None:
    """What a line says: the message field of a JSON object line (MESSAGE_KEYS; the line itself when it
    has none), else the line. Two lines that differ only in their fields (a time, a thread, a request id)
    say the same."""
    doc = _json_fields(line) if line else None
    if doc is not None:
        value = next((doc[k] for k in MESSAGE_KEYS if isinstance(doc.get(k), str)), None)
        if value is not None:
            return value
    return line


def message_sql(column: str) -> str:
    """message_of() as a DuckDB expression over `column` (the keys are constants of this module)."""
    fields = ", ".join(f"""CASE WHEN json_type({column}, '$."{k}"') = 'VARCHAR' """
                       f"""THEN json_extract_string({column}, '$."{k}"') END""" for k in MESSAGE_KEYS)
    return (f"CASE WHEN starts_with(ltrim({column}), '{{') AND json_valid({column}) "
            f"THEN coalesce({fields}, {column}) ELSE {column} END")
